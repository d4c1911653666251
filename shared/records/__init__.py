"""Run records: everything a service writes when it decides for a run, in one place.

- `names`: the decision slots of a run and the ids of its messages and archives;
- `decisions`: building every Decision (the attempt budget, the backoff, the hold rule);
- `steps`: a run step (slot, run record, outbox entries, audit, hold) and the packing of each
  recording script's arguments;
- `session_hash`: the one reader of the session record's fields the services decide on;
- `index`: the run index (run_id -> session) and a run's audit trail.
"""
