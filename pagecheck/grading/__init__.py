"""Grading student submissions: each one checked by a trusted suite against a sandboxed worker, scored by a rubric.

DESIGN.md has the trust boundary: the process tree, the protocol, what runs where.

    submission.py     what a submission is (tiny-llm checkout, .py file, package), its name, its staged copy
    plan.py           the settings of one grading run
    seeds.py          the public seed and the hidden per-submission seed derived from the secret
    shards.py         splitting submissions across machines by a stable hash of the name
    limits.py         the runner that applies rlimits in the child before exec
    sandbox.py        running one limited child: scrubbed env, own session, timeout, peak memory
    build.py          building a tiny-llm checkout's C++ extension in the staged copy (in the sandbox)
    child_plugin.py   the pytest plugin loaded in the trusted child: worker settings, seed pipe, input guard, journal
    wire.py           the worker protocol: frames of JSON and raw array buffers (the worker runs it too)
    worker_main.py    the worker: audit hook, tripwires, the subject, one request at a time (sent as source)
    tripwires.py      in the worker: MLX's SDPA trapped, dense gathers of pages watched (sent as source)
    launcher.py       builds the sandbox and runs one program in it: namespaces, mounts, user, rlimits, Landlock
    namespaces.py     unshare, id maps and mounts through ctypes
    landlock.py       Landlock through ctypes
    worker_process.py the trusted end of one worker: start, requests with deadlines, deaths; the protections probe
    remote_subject.py the `sandbox:` subject: proxies for the API names, handles, restarts per check
    sandboxed_command.py  a student command (an extension build) in the sandbox, its products taken back
    input_guard.py    every paged_attention call checked for changed inputs
    anticheat.py      the AST scan of the submission's source
    verdicts.py       turning a child's exit into a verdict
    suite_pass.py     one run of the invariants suite on a submission
    grade_one.py      staging, building, both passes, one results file
    results_store.py  atomic results files and the rule for reusing them
    schedule.py       running many submissions in parallel with progress
    rubric.py         points per invariant, prerequisites and anti-cheat actions, from TOML
    scoreboard.py     grades.md and grades.csv
    feedback.py       feedback/<name>.md for the student
    outputs.py        writing the scoreboard and feedback from the results
    merge.py          joining the results of shard runs
"""
