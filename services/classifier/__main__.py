from shared.runtime import run

from .service import ClassifierApp

if __name__ == "__main__":
    run(ClassifierApp())
