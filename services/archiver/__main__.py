from shared.platform.runtime import run
from shared.platform.service import ServiceApp

from .service import NAME, build

if __name__ == "__main__":
    run(ServiceApp(NAME, build))
