"""NATS decentralized authorization for Continuity: the operator, the accounts and the users as
signed JWTs (`jwt`), read from the same authorization the config-file layout ships (`conf`,
`layout`), pushed to the servers' account resolver while they run (`resolver`).

This is what lets a runner be issued, changed and revoked on a running cluster: each runner's
account is a JWT the operator signs and the servers' full resolver learns from a push, with no
file edited and no server restarted (docs/operations/nats-authorization.md).
"""
