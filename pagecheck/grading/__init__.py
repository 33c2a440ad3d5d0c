"""Grading student submissions: each one checked in its own limited process, scored by a rubric.

    submission.py   what a submission is (tiny-llm checkout, .py file, package) and its name
    shards.py       splitting submissions across machines by a stable hash of the name
    seeds.py        the public seed and the hidden per-submission seed derived from the secret
    rubric.py       points per invariant and anti-cheat penalties, from TOML
    limits.py       the runner that applies rlimits in the child before exec
    sandbox.py      running one limited child: scrubbed env, own session, timeout, peak memory
    sdpa_trap.py    MLX's fused SDPA replaced by a function that raises, while subject code runs
    child_plugin.py the pytest plugin loaded in the child: trap, journal, out-of-memory exit
    anticheat.py    the AST scan of the submission's paged attention
    build.py        building a tiny-llm checkout's C++ extension in the staged copy
    verdicts.py     turning a child's exit into a verdict
    suite_pass.py   one run of the invariants suite on a submission
    grade_one.py    staging, building, both passes, one results JSON
    results_store.py  atomic results files and the resume rule
    scoreboard.py   grades.md and grades.csv
    feedback.py     feedback/<name>.md for the student
    schedule.py     running many submissions in parallel with progress
"""
