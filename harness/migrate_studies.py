"""One-off, kept for reproducibility: write a study file (``harness/study_file.py``) into every results
folder made before study files, so that nothing reads meaning out of a folder's name.

The grid, the serving setting and the hosts come from each folder's run files (``Study.from_runs``).
The question and the roles were, until this migration, only in the folder names and the docs; they are
read from the names here, once, and written into the files. A folder that has a study file is left
as it is, so running it again changes nothing::

    .venv/bin/python -m harness.migrate_studies [--results results] [--dry-run]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.study_file import STUDY_FILE, Study, StudyFileError, write_study

ROOT = Path(__file__).resolve().parent.parent

QUESTIONS = {  # the folders of results/ made before study files
    "task2": "The handout's Task 2 sweep with its flags (one API server): max_num_batched_tokens 512-8192 at "
             "16 req/s and rate inf, TTFT, ITL and throughput per budget.",
    "task2_api-1": "The front-end study, one API server: budget 2048 at rate inf, does one API server keep up "
                   "with the engine?",
    "task2_api-4": "The front-end study, 4 API servers: budget 2048 at rate inf with one and two client "
                   "processes, then at Poisson rates below saturation (16 and 39 req/s).",
    "task2_api-8": "The front-end study, 8 API servers: budget 2048 at rate inf.",
    "task2_api-4_budgets": "Task 2 at rate inf with 4 API servers on one machine: how throughput moves with "
                           "max_num_batched_tokens 512-4096.",
    "task3": "The handout's Task 3 runs with its flags (one API server): vLLM's default against Strategy A and "
             "SJF at 8 and 40 req/s on the fixed and variable-length loads.",
    "task3_api-4": "Task 3 with 4 API servers at 39 req/s (0.9 x capacity): vLLM's default against Strategy A "
                   "and SJF on the fixed and variable-length loads.",
    "task3_api-4_sjf-varlen": "Task 3 with 4 API servers at 39 req/s on the variable-length load: vLLM's "
                              "default against SJF.",
    "task3_api-4_heavy": "SLO capacity on the GPU: vLLM's default against Strategy F on the heavy-tailed "
                         "load (burstiness 0.5) at 60, 68 and 76 req/s.",
    "replay_api-4": "The replay simulator against the H200: the loads of the 4-API-server Task 2 and Task 3 "
                    "runs replayed per strategy.",
    "replay_api-4_heavy": "The replay simulator against the H200 on the heavy-tailed SLO-capacity load.",
    "replay_budgets_api-4": "The replay simulator at Task 2's budgets at rate inf (the step model fitted at "
                            "2048 only) against the GPU's budget sweep.",
    "replay_screen_api-4": "The simulated SLO screen: which strategies could raise SLO capacity, on four "
                           "loads at several rates, to plan GPU runs.",
}
ROLES = {"task2": ("handout-setting",), "task3": ("handout-setting",),
         "task2_api-1": ("frontend-study",), "task2_api-4": ("frontend-study",),
         "task2_api-8": ("frontend-study",), "replay_api-4": ("replay-validation",),
         "replay_api-4_heavy": ("replay-validation",), "replay_budgets_api-4": ("budget-replays",),
         "replay_screen_api-4": ("screen",)}
BUDGET_SWEEP = "task2_api-4_budgets"  # what replay_budgets_api-4 replays


def replays_of(name: str, folders: list[str]) -> tuple[str, ...]:
    """The GPU folders a replay folder replays, by the names' old convention: ``replay_<name>``
    replays ``task2_<name>`` and ``task3_<name>``; the budget replays replay the budget sweep."""
    role = ROLES.get(name, ())
    if "budget-replays" in role:
        return (BUDGET_SWEEP,)
    if "replay-validation" not in role:
        return ()
    suffix = name.split("_", 1)[1]
    return tuple(f for task in ("task2", "task3") for f in sorted(folders)
                 if f.startswith(task + "_") and f.endswith("_" + suffix))


def migrate(results: Path, dry_run: bool = False) -> list[Path]:
    """Write the study file of every folder of ``results`` that holds runs and none; the paths
    written (or, with ``dry_run``, that would be). A folder with runs this migration has no
    question for fails: it was made after study files and should have been given one."""
    folders = sorted(p.name for p in results.iterdir() if p.is_dir())
    written = []
    for name in folders:
        folder = results / name
        if (folder / STUDY_FILE).exists():
            continue
        try:
            study = Study.from_runs(folder, QUESTIONS.get(name, ""), ROLES.get(name, ()), replays_of(name, folders))
        except StudyFileError as err:
            if "no run files" in str(err):
                continue  # figures, logs, step logs
            raise
        if not study.question:
            raise StudyFileError(f"{folder}: no question known for this folder; write its study file by hand "
                                 "(harness.study_file.write_study)")
        written.append(folder / STUDY_FILE if dry_run else write_study(folder, study))
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--dry-run", action="store_true", help="list the files it would write")
    args = parser.parse_args(argv)
    for path in migrate(args.results, args.dry_run):
        print(("would write " if args.dry_run else "wrote ") + str(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
