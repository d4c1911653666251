"""Decision policies: the recovery table (contract 4.4) and the resume rules (3.3) as versioned
data, the invariants no policy may break, and the replay of recorded decisions under a
candidate. The shipped policy is `SHIPPED`; `load` reads a candidate and checks it."""

from .document import dump, from_file, load
from .invariants import INVARIANTS, PolicyRefused
from .policy import ATTEMPT_BUDGET, SHIPPED, Policy

__all__ = ["ATTEMPT_BUDGET", "INVARIANTS", "SHIPPED", "Policy", "PolicyRefused", "dump", "from_file", "load"]
