from services.console.service import ConsoleApp
from shared.runtime import run

if __name__ == "__main__":
    run(ConsoleApp())
