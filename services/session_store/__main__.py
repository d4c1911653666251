from shared.runtime import run

from .service import SessionStoreApp

if __name__ == "__main__":
    run(SessionStoreApp())
