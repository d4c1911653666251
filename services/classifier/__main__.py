from shared.platform.runtime import run
from shared.platform.service import Service

from . import service

if __name__ == "__main__":
    run(Service.of(service))
