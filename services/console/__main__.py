from services.console.service import ConsoleApp
from shared.platform.runtime import run

if __name__ == "__main__":
    run(ConsoleApp())
