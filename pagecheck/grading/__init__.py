"""Grading student submissions: each one checked in its own limited process, scored by a rubric.

    submission.py     what a submission is (tiny-llm checkout, .py file, package), its name, its staged copy
    plan.py           the settings of one grading run
    seeds.py          the public seed and the hidden per-submission seed derived from the secret
    shards.py         splitting submissions across machines by a stable hash of the name
    limits.py         the runner that applies rlimits in the child before exec
    sandbox.py        running one limited child: scrubbed env, own session, timeout, peak memory
    build.py          building a tiny-llm checkout's C++ extension in the staged copy
    child_plugin.py   the pytest plugin loaded in the child: trap, input guard, journal, out-of-memory exit
    sdpa_trap.py      MLX's fused SDPA replaced by a function that raises, while subject code runs
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
