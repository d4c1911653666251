from shared.runtime import run

from .service import ReconciliationApp

if __name__ == "__main__":
    run(ReconciliationApp())
