/*
 * Continuity's recording protocol, as a Promela model checked by spin (docs/protocol.md;
 * spec/check.sh runs it).
 *
 * One run of one runner on one saved session, attempts 1..MAXATT. The services are processes
 * that may crash between their steps and restart from nothing (MAXCRASH crashes in all); a
 * message that was not acknowledged is delivered again, a runner may re-send an attempt's
 * report under a new event_id (saying something else), and a Redis script is one atomic step
 * (d_step), as Redis runs it. Where the model abstracts, a comment says so.
 *
 *   Runner      the runner: decide, resume, report resume_failed, read its decisions, commit
 *               a fresh session (services/session_store SessionRequests.decide, .commit)
 *   Zombie      a runner process from before any replacement: it commits the record it read
 *               at the start, with that epoch, at any later moment (session_commit.lua)
 *   Classifier  services/classifier EventHandler._handle: read the session, decide by the
 *               table, record_step.lua, flush the outbox, acknowledge
 *   Archiver    services/archiver ArchiveHandler.archive (ARCHIVERS replicas):
 *               archive_begin.lua, the remote move, archive_result.lua, then
 *               archive_local_move.lua, or record_step.lua and archive_done.lua; flush; ack
 *   Reconciler  services/reconciliation ReconciliationStore.open: reconciliation_open.lua
 *   Operator    OPERATORS people: ReconciliationHandlers.resolve (reconciliation_resolve.lua)
 *               or .retry (reconciliation_retry.lua), then the publication
 *   Sweeper     shared/records/outbox.py Outbox.sweep: publishes what it finds in the outbox
 *   init        starts them; once nothing can move any more, checks what must have arrived
 *
 * Invariants (assertions; ghost variables are named g_*):
 *   I1  exactly one decision per (run, attempt) reaches the runner's decision stream: at most
 *       one copy of at most one failure decision (retry_same_session, open_replacement,
 *       operator, reconcile) per attempt, and at the end one for every reported attempt
 *   I2  no open_replacement after a closed (deterministic) refusal or while a side effect is
 *       pending (a reconcile recorded and not resolved)
 *   I3  the local move only after a successful remote move; at most one remote move per
 *       archive_id
 *   I4  no commit accepted with a stale epoch (read before the latest replacement)
 *   I5  a held session is never archived or replaced
 *   I6  every reconciliation (and operator retry) is delivered at most once, and at the end
 *       every recorded one was delivered
 *   I7  an archive verdict is recorded only while the session's policy allows a replacement
 *
 * Guards: each is a line of the code; -D<NAME> removes it, and the check must then fail.
 *   NO_SLOT_GUARD       record_step.lua finds the decision slot taken and records nothing
 *   NO_ATOMIC_OUTBOX    the outbox entry is written by the same script as the slot
 *   NO_MSGID            publications carry Nats-Msg-Id; the stream drops a second one
 *   NO_SWEEPER          the outbox sweeper publishes entries a crash left behind
 *   NO_CLOSED_ROWS      the table's rows for closed (deterministic) classes come first
 *   NO_PENDING_ROW      the table's first row also takes any report with a pending tool call
 *   NO_READ_CHECK       record_step.lua records only while policy and epoch are those read
 *   NO_HOLD             an operator or reconcile step holds the saved session (lib.lua)
 *   NO_DECIDE_HELD      decide answers fresh (session_held) for a held record
 *   NO_REMOTE_OK_CHECK  the archiver makes the local move only after a remote move's exit 0
 *   NO_SINGLE_SEND      archive_begin.lua lets one caller only send the remote move
 *   NO_EPOCH_BUMP       archive_local_move.lua raises the epoch
 *   NO_EPOCH_FENCE      session_commit.lua refuses a commit with a lower epoch (stale_epoch)
 *   NO_RESOLVE_ONCE     reconciliation_resolve.lua records only while the record is open and
 *                       its continuation slot is free (two checks, either suffices: the
 *                       planted removal takes out both)
 *
 * Bounds: the defaults below (one attempt, a re-send, two archivers, two operators, two
 * crashes); spec/check.sh also checks two attempts (-DMAXATT=2 -DARCHIVERS=1 -DOPERATORS=1
 * -DRESEND=0).
 */

#ifndef MAXATT
#define MAXATT 1          /* attempts of the run (1 or 2) */
#endif
#ifndef MAXCRASH
#define MAXCRASH 2        /* crashes of services, all together */
#endif
#ifndef ARCHIVERS
#define ARCHIVERS 2       /* archiver replicas */
#endif
#ifndef OPERATORS
#define OPERATORS 2       /* people acting at once */
#endif
#ifndef RESEND
#define RESEND 1          /* the first attempt's report may be re-sent */
#endif
#define BUDGET 3          /* shared/records/decisions.py ATTEMPT_BUDGET */

/* What a resume_failed report says. UNCL: no closed class, no pending tool call. CLOSED: an
   authenticated provider_attach_refused (any closed class decides alike: operator). PENDING:
   an unclassified failure with a pending_tool_call. */
#define UNCL 1
#define CLOSED 2
#define PENDING 3

/* Slot values: a decision's action, or the classifier's archive work item. */
#define V_RETRY 1
#define V_REPLACE 2
#define V_OPERATOR 3
#define V_RECONCILE 4
#define V_CONTINUE 5
#define V_ARCHIVE 6

/* Message ids: (attempt, kind). Kinds 0..4 are decisions (kind = action - 1) on
   continuity.decisions.<runner_id>, 5 and 6 the work items on continuity.work.archive and
   continuity.work.reconcile. Kind = slot value - 1 throughout. */
#define K_RETRY 0
#define K_REPLACE 1
#define K_OPERATOR 2
#define K_RECONCILE 3
#define K_CONTINUE 4
#define K_WARCHIVE 5
#define K_WRECONCILE 6
#define NKIND 7
#define NMSG (MAXATT * NKIND)
#define MSG(a, k) (((a) - 1) * NKIND + (k))
#define ATT(m) ((m) / NKIND + 1)
#define KIND(m) ((m) % NKIND)

/* Decision slots of the run: the classifier's <attempt>, the archiver's <attempt>:archive,
   an operator's <attempt>:continue. */
#define CLS 0
#define ARCH 1
#define CONT 2

/* Session states (no `state` field reads as active). */
#define ACTIVE 0
#define HELD 1
#define ARCHIVED 2

/* Run statuses. */
#define RS_NONE 0
#define RS_RETRYING 1
#define RS_REPLACING 2
#define RS_OPERATOR 3
#define RS_RECONCILING 4
#define RS_CONTINUED 5

/* Archive progress. */
#define AP_ABSENT 0
#define AP_STARTED 1
#define AP_RESULT 2
#define AP_DONE 3
#define RES_OK 1
#define RES_FAILED 2

/* Reconciliation record. */
#define RC_NONE 0
#define RC_OPEN 1
#define RC_DELIVERED 2

/* ---------------------------------------------------------------------------------------
   Redis: continuity:session:{sk}, the run's records, its archive progress, its
   reconciliation, the session's outbox.                                                   */
byte s_handle = 1;        /* native_session_id: the runner's handles are 1, 2, 3 ... */
byte s_state = ACTIVE;
byte s_epoch = 0;
bit s_policy;             /* 1: allow_replacement_after_resume_failure; 0: same_session_only */

byte slot[(MAXATT + 1) * 3];          /* slot[a * 3 + kind] */
#define SLOT(a, k) slot[(a) * 3 + (k)]
byte run_status = RS_NONE;
byte run_attempt = 0;

bit outbox[NMSG];                     /* continuity:outbox:{sk}: message id -> entry */

byte ap_state[MAXATT + 1];            /* continuity:archiveop:{sk}:<run>-<attempt> */
byte ap_res[MAXATT + 1];
bit ap_lease[MAXATT + 1];             /* lease_until_ms is still ahead of the server's clock */

byte rc_status = RC_NONE;             /* continuity:reconciliation:{sk}:<run> */
byte rc_att = 0;
byte rc_outcome = 0;

/* JetStream. Events: two per attempt at most (the report and one re-send). */
#define NEV (MAXATT * 2)
byte ev_h[NEV];
byte ev_c[NEV];
bit ev_avail[NEV];                    /* stored on CONTINUITY_EVENTS and not acknowledged */
bit seen[NMSG];                       /* message ids within the duplicate window */
bit instream[NMSG];                   /* a decision is on the runner's decisions stream */
bit wq[NMSG];                         /* a work item waits on CONTINUITY_WORK (unacked) */

byte crashes = 0;
byte next_handle = 2;

/* Ghosts: what the invariants speak of. */
byte g_fdec[MAXATT + 1];    /* copies of the attempt's failure decision on the stream */
byte g_cont[MAXATT + 1];    /* copies of the attempt's continue_fresh on the stream */
byte g_cont_rec[MAXATT + 1];/* continue_fresh decisions recorded for the attempt */
bit g_reported[MAXATT + 1]; /* the runner reported a failure of the attempt */
bit g_refused[MAXATT + 1];  /* a step was recorded for a closed or pending-tool-call report */
bit g_pending;              /* a reconcile is recorded and not yet resolved */
byte g_held = 0;            /* the handle a holding decision keeps for an operator */
byte g_sent[MAXATT + 1];    /* remote moves sent for the attempt's archive_id */
bit g_moved[MAXATT + 1];    /* the runner answered exit 0: it moved its state aside */
byte g_gen = 0;             /* replacements (local moves) so far */

#define CRASH \
  if \
  :: crashes < MAXCRASH -> crashes++; goto restart \
  :: true -> skip \
  fi

/* Publish with Nats-Msg-Id: within the duplicate window the stream keeps the first only. */
/* Publish with Nats-Msg-Id: within the duplicate window the stream keeps the first only.
   Used inside an atomic step. */
inline publish(m) {
#ifdef NO_MSGID
  if :: true ->
#else
  if :: !seen[m] ->
#endif
    seen[m] = 1;
    if
    :: KIND(m) <= K_RECONCILE ->
      instream[m] = 1;
      g_fdec[ATT(m)]++;
      /* I1: one decision per (run, attempt) reaches the runner's decision stream */
      assert(g_fdec[ATT(m)] <= 1)
    :: KIND(m) == K_CONTINUE ->
      instream[m] = 1;
      g_cont[ATT(m)]++;
      /* I6: a continuation (a reconciliation's delivery, an operator's retry) at most once */
      assert(g_cont[ATT(m)] <= 1)
    :: else -> wq[m] = 1
    fi
  :: else -> skip
  fi
}

/* The outbox entries a recorded step announces (steps.py, classifier step.announced_ids). */
inline put_entries(a, v) {
  if
  :: v == V_RECONCILE -> outbox[MSG(a, K_RECONCILE)] = 1; outbox[MSG(a, K_WRECONCILE)] = 1
  :: else -> outbox[MSG(a, v - 1)] = 1
  fi
}

/* lib.lua hold_session: only while the record still saves the handle and is not archived. */
inline hold(h) {
  if
  :: s_handle == h && s_state != ARCHIVED ->
#ifndef NO_HOLD
    s_state = HELD;
#endif
    g_held = h
  :: else -> skip
  fi
}

/* services/classifier table.decide (contract 4.4), first matching row. The storm breaker's
   row is not modelled (the tenant's budget is never spent here). */
inline table(c, a, p, v) {
  if
#ifndef NO_PENDING_ROW
  :: c == PENDING -> v = V_RECONCILE
#endif
#ifndef NO_CLOSED_ROWS
  :: c == CLOSED -> v = V_OPERATOR
#endif
  :: else ->
    if
    :: a >= BUDGET -> v = V_OPERATOR
    :: a < BUDGET && p == 1 -> v = V_ARCHIVE
    :: else -> v = V_RETRY
    fi
  fi
}

/* session_commit.lua for a runner's commit carrying `ep` (read at generation `g`) and handle
   `h`; the checkpoint policy it writes is `pol`. Revision, owner and generation are not
   modelled (tenancy and generations are other checks). Used inside an atomic step. */
inline commit(h, ep, g, pol) {
  if
#ifndef NO_EPOCH_FENCE
  :: ep < s_epoch -> skip                                /* stale_epoch */
#endif
  :: s_state == HELD && s_handle == h -> skip           /* session_held */
  :: else ->
    /* I4: no commit accepted with a stale epoch: the committer read the record after the
       latest replacement */
    assert(g == g_gen);
    if
    :: s_handle != h -> g_held = 0   /* the held record is copied aside, unchanged */
    :: else -> skip
    fi;
    s_handle = h; s_state = ACTIVE; s_policy = pol
  fi
}

/* ------------------------------------------------------------------------------------- */

/* The runner (honest): it reports an attempt's failure only after the decision of the one
   before let it go on, and resumes only what decide told it to resume. Its own crashes are
   its re-sends. */
proctype Runner() {
  byte a = 1, h;
  bit pol;
  do
  :: a > MAXATT -> break
  :: else ->
    /* continuity.sessions.decide (services/session_store rules.decide): a record is resumed
       only while active (the model's runner never changes model, cwd or cursor). A fresh
       session is committed after its turn, with a new handle and the epoch decide answered.
       A resume fails and is reported (the decide and the report are one step: nothing that
       runs meanwhile changes what the report says). */
    atomic {
      h = s_handle; pol = s_policy;
#ifdef NO_DECIDE_HELD
      if :: s_state == ACTIVE || s_state == HELD -> skip
#else
      if :: s_state == ACTIVE -> skip
#endif
      :: else -> h = next_handle; next_handle++; commit(h, s_epoch, g_gen, pol); goto turned
      fi;
      ev_h[(a - 1) * 2] = h; g_reported[a] = 1;
      if
      :: ev_c[(a - 1) * 2] = UNCL
      :: a == 1 -> ev_c[(a - 1) * 2] = CLOSED
      :: ev_c[(a - 1) * 2] = PENDING
      fi;
      ev_avail[(a - 1) * 2] = 1
    };
    /* A re-send of the first attempt's report, under a new event_id, saying anything. */
    if
    :: a == 1 && RESEND ->
      atomic {
        ev_h[1] = h;
        if :: ev_c[1] = UNCL :: ev_c[1] = CLOSED :: ev_c[1] = PENDING fi;
        ev_avail[1] = 1
      }
    :: skip
    fi;
    /* Its decision, on continuity.decisions.<runner_id>. After open_replacement it opens a
       fresh session and commits it with the epoch the decision carries. */
end_decision:
    if
    :: atomic { instream[MSG(a, K_RETRY)] -> a++; h = 0 }
    :: atomic { instream[MSG(a, K_REPLACE)] ->
         h = next_handle; next_handle++;
         commit(h, s_epoch, g_gen, pol);
         a++; h = 0 }
    :: instream[MSG(a, K_OPERATOR)] || instream[MSG(a, K_RECONCILE)] ->
end_stopped:
      atomic { instream[MSG(a, K_CONTINUE)] -> a++; h = 0 }    /* an operator's continue_fresh */
    fi;
turned:
    skip
  od
}

/* A runner process from before any replacement (contract 3.2: "a zombie runner"): it read
   the record at the start (handle 1, epoch 0) and commits it, with that epoch, at any later
   moment, and with the policy same_session_only (a commit of the policy it read changes
   nothing the model sees). */
proctype Zombie() {
  atomic { commit(1, 0, 0, 0) }
}

/* services/classifier EventHandler._handle. One replica; its restarts (a message not
   acknowledged is delivered again) and the runner's re-sends give the repeated deliveries. */
proctype Classifier() {
  byte e, a, h, c, p, ep, v, r, ex;
  goto wait;
restart:
  atomic { e = 0; a = 0; h = 0; c = 0; p = 0; ep = 0; v = 0; r = 0; ex = 0 };
wait:
  /* a delivery; then claim_run and HMGET of the session (policy, epoch); table.decide */
end_wait:
  atomic {
    if
    :: ev_avail[0] -> e = 0
    :: ev_avail[1] -> e = 1
#if MAXATT >= 2
    :: ev_avail[2] -> e = 2
#endif
    fi;
    a = e / 2 + 1; h = ev_h[e]; c = ev_c[e];
    p = s_policy; ep = s_epoch;
    table(c, a, p, v)
  };
record:
  /* record_step.lua (the ownership checks are not modelled: one runner) */
  atomic {
    ex = SLOT(a, CLS);
    if
#ifndef NO_SLOT_GUARD
    :: ex != 0 -> r = 0                                     /* duplicate */
#endif
#ifndef NO_READ_CHECK
    :: s_policy != p || s_epoch != ep -> r = 2              /* the session changed */
#endif
    :: else ->
      r = 1;
      SLOT(a, CLS) = v;
      /* I7: an archive (a replacement) is recorded only while the policy allows one */
      assert(v != V_ARCHIVE || s_policy == 1);
      if :: v == V_ARCHIVE -> run_status = RS_REPLACING :: else -> run_status = v fi;
      run_attempt = a;
#ifndef NO_ATOMIC_OUTBOX
      put_entries(a, v);
#endif
      if :: c != UNCL -> g_refused[a] = 1 :: else -> skip fi;
      if :: v == V_RECONCILE -> g_pending = 1 :: else -> skip fi;
      if :: v == V_OPERATOR || v == V_RECONCILE -> hold(h) :: else -> skip fi
    fi
  };
#ifdef NO_ATOMIC_OUTBOX
  if :: r == 1 -> CRASH; d_step { put_entries(a, v) } :: else -> skip fi;
#endif
  if
  :: r == 2 ->
    /* SessionChanged: read and decide again on the new record */
    atomic { p = s_policy; ep = s_epoch; table(c, a, p, v) };
    goto record
  :: r == 0 ->
    /* _flush_leftovers: publish what the slot's step announced and is still in the outbox */
    v = ex;
    atomic {
      if :: outbox[MSG(a, v - 1)] -> publish(MSG(a, v - 1)) :: else -> skip fi;
      if
      :: v == V_RECONCILE && outbox[MSG(a, K_WRECONCILE)] -> publish(MSG(a, K_WRECONCILE))
      :: else -> skip
      fi
    }
  :: r == 1 ->
    /* Outbox.flush: publish every entry, then HDEL those sent */
    CRASH;
    atomic {
      publish(MSG(a, v - 1));
      if :: v == V_RECONCILE -> publish(MSG(a, K_WRECONCILE)) :: else -> skip fi
    }
  fi;
  /* HDEL of the published entries, then the acknowledgement (a crash before them is a
     redelivery that publishes the entries again, as the sweeper may) */
  d_step {
    outbox[MSG(a, v - 1)] = 0;
    if :: v == V_RECONCILE -> outbox[MSG(a, K_WRECONCILE)] = 0 :: else -> skip fi;
    ev_avail[e] = 0;
    e = 0; a = 0; h = 0; c = 0; p = 0; ep = 0; v = 0; r = 0; ex = 0
  };
  goto wait
}

/* archive_begin.lua answers */
#define B_DECIDED 1
#define B_SEND 2
#define B_WAIT 3
#define B_EXPIRED 4
#define B_RESULT 5

inline archive_begin(a, st, res) {
  if
  :: SLOT(a, ARCH) != 0 -> st = B_DECIDED
  :: else ->
    if
    :: ap_state[a] == AP_ABSENT -> ap_state[a] = AP_STARTED; ap_lease[a] = 1; st = B_SEND
#ifdef NO_SINGLE_SEND
    :: ap_state[a] == AP_STARTED -> ap_lease[a] = 1; st = B_SEND
#else
    :: ap_state[a] == AP_STARTED && ap_lease[a] -> st = B_WAIT
    :: ap_state[a] == AP_STARTED && !ap_lease[a] -> st = B_EXPIRED
#endif
    :: else -> st = B_RESULT; res = ap_res[a]      /* load_result */
    fi
  fi
}

/* services/archiver ArchiveHandler.archive; ARCHIVERS replicas take the work item, as
   JetStream gives it to another when an ack wait ends or its replica died. The epoch is read
   and the local move made in one step: nothing modelled changes the epoch in between (a
   transfer or a claim would; epoch_changed is not reached). */
proctype Archiver() {
  byte a, st, res, v, r;
  goto wait;
restart:
  atomic { a = 0; st = 0; res = 0; v = 0; r = 0 };
wait:
end_wait:
  atomic {
    if
    :: wq[MSG(1, K_WARCHIVE)] -> a = 1
#if MAXATT >= 2
    :: wq[MSG(2, K_WARCHIVE)] -> a = 2
#endif
    fi;
    archive_begin(a, st, res)
  };
again:
  if
  :: st == B_WAIT ->
    /* _begin: poll while the lease runs. Either the sender records a result, or time passes
       beyond the lease (its sender died, or is slow: its answer then finds the progress moved
       on). Time is abstract: the lease may end at any moment. */
    atomic {
      if
      :: ap_state[a] != AP_STARTED -> skip
      :: ap_lease[a] = 0
      fi;
      archive_begin(a, st, res)
    };
    goto again
  :: st == B_DECIDED -> goto finish
  :: st == B_SEND ->
    /* remote.ask: the runner moves its state aside and answers exit 0, or fails, or its
       answer is lost (timed out: counted as failed) */
    atomic {
      g_sent[a]++;
      /* I3: at most one remote move per archive_id */
      assert(g_sent[a] <= 1);
      if
      :: g_moved[a] = 1; res = RES_OK
      :: res = RES_FAILED
      fi
    };
    CRASH;
    goto keep
  :: st == B_EXPIRED ->
    /* the sender died waiting: the result is unknown, counted as timed out; never re-sent */
    res = RES_FAILED;
    goto keep
  :: st == B_RESULT -> goto act
  fi;
keep:
  /* _keep: archive_result.lua records a result only while the move is remote_started;
     otherwise the delivery acts on the recorded one */
  atomic {
    if
    :: ap_state[a] == AP_STARTED -> ap_state[a] = AP_RESULT; ap_res[a] = res
    :: else -> res = ap_res[a]
    fi
  };
act:
  if
#ifdef NO_REMOTE_OK_CHECK
  :: true ->
#else
  :: res == RES_OK ->
#endif
    /* _replace: read the epoch, then archive_local_move.lua */
    d_step {
      if
      :: SLOT(a, ARCH) != 0 -> r = 0                        /* duplicate */
      :: else ->
        r = 1;
        /* I3: the local move only after a successful remote move */
        assert(ap_res[a] == RES_OK && g_moved[a]);
        /* I5: a held session is never archived or replaced */
        assert(s_state != HELD && !(g_held != 0 && g_held == s_handle));
        /* I2: no open_replacement after a closed refusal or while a side effect is pending */
        assert(!g_refused[a] && !g_pending);
        s_state = ARCHIVED;
#ifndef NO_EPOCH_BUMP
        s_epoch++;
#endif
        g_gen++;
        SLOT(a, ARCH) = V_REPLACE;
        run_status = RS_REPLACING; run_attempt = a;
        outbox[MSG(a, K_REPLACE)] = 1;
        ap_state[a] = AP_DONE
      fi
    };
    if
    :: r == 0 -> goto finish
    :: r == 1 -> CRASH; d_step { publish(MSG(a, K_REPLACE)); v = V_REPLACE }
    fi
  :: else ->
    /* _refuse: retry_same_session while the budget lasts, else operator (held): record_step.lua
       in the archive slot, without a read check */
    if :: a < BUDGET -> v = V_RETRY :: else -> v = V_OPERATOR fi;
    d_step {
      if
#ifndef NO_SLOT_GUARD
      :: SLOT(a, ARCH) != 0 -> r = 0
#endif
      :: else ->
        r = 1;
        SLOT(a, ARCH) = v;
        run_status = v; run_attempt = a;
        outbox[MSG(a, v - 1)] = 1;
        if :: v == V_OPERATOR -> hold(ev_h[(a - 1) * 2]) :: else -> skip fi
      fi
    };
    if
    :: r == 0 -> goto finish
    :: r == 1 ->
      CRASH;
      /* archive_done.lua, then the publication */
      d_step { ap_state[a] = AP_DONE; publish(MSG(a, v - 1)) }
    fi
  fi;
  goto ack;
finish:
  /* _finish_recorded: publish the recorded decision if it is still in the outbox */
  atomic {
    v = SLOT(a, ARCH);
    if :: outbox[MSG(a, v - 1)] -> publish(MSG(a, v - 1)) :: else -> skip fi
  };
ack:
  /* HDEL, then the acknowledgement */
  atomic {
    outbox[MSG(a, v - 1)] = 0;
    wq[MSG(a, K_WARCHIVE)] = 0;
    a = 0; st = 0; res = 0; v = 0; r = 0
  };
  goto wait
}

/* services/reconciliation ReconciliationStore.open: reconciliation_open.lua, then the
   acknowledgement (a crash in between is a redelivery that finds the record: 'exists'; the
   listing index beside it is not modelled). */
proctype Reconciler() {
end_wait:
  do
  :: d_step {
       wq[MSG(1, K_WRECONCILE)] ->
       if
       :: rc_att != 0 && (rc_att >= 1 || rc_status != RC_DELIVERED) -> skip   /* exists */
       :: else -> rc_status = RC_OPEN; rc_att = 1; rc_outcome = 0
       fi;
       wq[MSG(1, K_WRECONCILE)] = 0
     }
#if MAXATT >= 2
  :: d_step {
       wq[MSG(2, K_WRECONCILE)] ->
       if
       :: rc_att != 0 && (rc_att >= 2 || rc_status != RC_DELIVERED) -> skip   /* exists */
       :: else -> rc_status = RC_OPEN; rc_att = 2; rc_outcome = 0             /* (re)opened */
       fi;
       wq[MSG(2, K_WRECONCILE)] = 0
     }
#endif
  od
}

/* A person, once there is something to act on: resolves an open reconciliation (with one
   of two outcomes), or retries a run stopped for an operator. The service loads the record,
   then runs the script. A crash of the reconciliation service after recording loses the
   reply and the publication; nothing redelivers a request: the sweeper publishes it. */
proctype Operator() {
  byte a, o;
  bit resolve, r;
end_wait:
  atomic {
    rc_status == RC_OPEN || run_status == RS_OPERATOR;
    if
    :: rc_status == RC_OPEN -> resolve = 1; a = rc_att; if :: o = 1 :: o = 2 fi
    :: else -> resolve = 0; a = run_attempt
    fi
  };
  if
  :: resolve ->
    /* ReconciliationHandlers.resolve: reconciliation_resolve.lua */
    d_step {
      if
#ifndef NO_RESOLVE_ONCE
      :: rc_status == RC_DELIVERED -> skip                      /* already_delivered, conflict */
#endif
      :: rc_att != a -> skip                                    /* changed */
#ifndef NO_RESOLVE_ONCE
      :: SLOT(a, CONT) != 0 -> skip                             /* slot_taken */
#endif
      :: else ->
        r = 1;
        SLOT(a, CONT) = V_CONTINUE;
        rc_status = RC_DELIVERED; rc_outcome = o;
        run_status = RS_CONTINUED; run_attempt = a;
        outbox[MSG(a, K_CONTINUE)] = 1;
        g_pending = 0;
        g_cont_rec[a]++;
        /* I6: a reconciliation is delivered at most once */
        assert(g_cont_rec[a] <= 1)
      fi
    }
  :: else ->
    /* ReconciliationHandlers.retry: reconciliation_retry.lua */
    d_step {
      if
      :: run_status == RS_RECONCILING || rc_status == RC_OPEN -> skip  /* reconciliation_required */
      :: run_attempt != a -> skip                                      /* changed */
      :: SLOT(a, CONT) != 0 -> skip                                    /* already_delivered */
      :: run_status != RS_OPERATOR -> skip                             /* not_stopped */
      :: else ->
        r = 1;
        SLOT(a, CONT) = V_CONTINUE;
        run_status = RS_CONTINUED;
        outbox[MSG(a, K_CONTINUE)] = 1;
        g_cont_rec[a]++;
        assert(g_cont_rec[a] <= 1)
      fi
    }
  fi;
  if
  :: r == 1 ->
    /* _deliver: Outbox.flush (publish, HDEL), unless the service dies first */
    if
    :: crashes < MAXCRASH -> crashes++
    :: d_step { publish(MSG(a, K_CONTINUE)); outbox[MSG(a, K_CONTINUE)] = 0 }
    fi
  :: else -> skip
  fi;
  d_step { a = 0; o = 0; r = 0; resolve = 0 }
}

/* shared/records/outbox.py Outbox.sweep: HGETALL of an outbox, then publish each entry it
   read and HDEL it. The grace period is timing: the sweeper may meet an entry at any moment
   after it was recorded, also while its publisher is still flushing it. Reading, publishing
   and deleting an entry are one step here: a sweep that read an entry its publisher then
   published and deleted publishes it once more, which is what this step does when it runs
   before the publisher's. A crash of the sweeper is the same as a later sweep. */
proctype Sweeper() {
end_idle:
  do
  :: d_step { outbox[0] -> publish(0); outbox[0] = 0 }
  :: d_step { outbox[1] -> publish(1); outbox[1] = 0 }
  :: d_step { outbox[2] -> publish(2); outbox[2] = 0 }
  :: d_step { outbox[3] -> publish(3); outbox[3] = 0 }
  :: d_step { outbox[4] -> publish(4); outbox[4] = 0 }
  :: d_step { outbox[5] -> publish(5); outbox[5] = 0 }
  :: d_step { outbox[6] -> publish(6); outbox[6] = 0 }
#if MAXATT >= 2
  :: d_step { outbox[7] -> publish(7); outbox[7] = 0 }
  :: d_step { outbox[8] -> publish(8); outbox[8] = 0 }
  :: d_step { outbox[9] -> publish(9); outbox[9] = 0 }
  :: d_step { outbox[10] -> publish(10); outbox[10] = 0 }
  :: d_step { outbox[11] -> publish(11); outbox[11] = 0 }
  :: d_step { outbox[12] -> publish(12); outbox[12] = 0 }
  :: d_step { outbox[13] -> publish(13); outbox[13] = 0 }
#endif
  od
}

init {
  byte a;
  /* The policy that allows a replacement; the zombie's commit may take it away. */
  s_policy = 1;
  atomic {
    run Runner();
    run Zombie();
    run Classifier();
    run Archiver();
#if ARCHIVERS >= 2
    run Archiver();
#endif
    run Reconciler();
    run Operator();
#if OPERATORS >= 2
    run Operator();
#endif
#ifndef NO_SWEEPER
    run Sweeper();
#endif
  };
  /* Nothing can move any more: every process waits for a message that will not come. */
  timeout;
  a = 1;
  do
  :: a > MAXATT -> break
  :: else ->
    /* I1: every reported attempt's decision reached the runner's stream */
    assert(!g_reported[a] || g_fdec[a] == 1);
    /* I6: every recorded continuation was delivered */
    assert(g_cont_rec[a] == g_cont[a]);
    a++
  od
}
