from shared.runtime import run

from .service import ArchiverApp

if __name__ == "__main__":
    run(ArchiverApp())
