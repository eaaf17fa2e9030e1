"""The study file (``harness/study_file.py``): every results folder says what it holds, the migration
writes it once, and the loader and the report read it instead of the folder's name."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import plot_results
from harness import results as layer
from harness.migrate_studies import migrate
from harness.report import frontend, replay, slo
from harness.study_file import MIGRATION, STUDY_FILE, Study, StudyFileError, read_study

RESULTS = Path(__file__).resolve().parent.parent / "results"
MIGRATED = ("task2_api-1", "task2_api-8", "task2_api-4_budgets", "replay_budgets_api-4")


def test_every_results_folder_of_runs_has_a_study_file():
    for folder in sorted(p for p in RESULTS.iterdir() if p.is_dir()):
        if any(layer.load_runs(folder)):
            assert isinstance(read_study(folder), Study), folder


def test_the_migration_writes_what_is_committed_once(tmp_path):
    """On a copy without study files, the migration writes the committed files; run again, it
    writes nothing and leaves them as they are."""
    for name in MIGRATED:
        shutil.copytree(RESULTS / name, tmp_path / name, ignore=shutil.ignore_patterns(STUDY_FILE, "logs"))
    (tmp_path / "figures").mkdir()
    written = migrate(tmp_path)
    assert sorted(p.parent.name for p in written) == sorted(MIGRATED)
    for name in MIGRATED:
        assert json.loads((tmp_path / name / STUDY_FILE).read_text()) == json.loads((RESULTS / name / STUDY_FILE).read_text())
    before = {name: (tmp_path / name / STUDY_FILE).stat().st_mtime_ns for name in MIGRATED}
    assert migrate(tmp_path) == []
    assert before == {name: (tmp_path / name / STUDY_FILE).stat().st_mtime_ns for name in MIGRATED}
    study = read_study(tmp_path / "replay_budgets_api-4")
    assert study.kind == "replay" and study.roles == ("budget-replays",) and study.replays_of == ("task2_api-4_budgets",)
    assert read_study(tmp_path / "task2_api-8").api_servers == 8


def test_the_migration_refuses_a_folder_it_has_no_question_for(tmp_path):
    shutil.copytree(RESULTS / "task2_api-8", tmp_path / "task2_new", ignore=shutil.ignore_patterns(STUDY_FILE, "logs"))
    with pytest.raises(StudyFileError, match="task2_new: no question"):
        migrate(tmp_path)


def test_a_folder_of_runs_without_a_study_file_fails_naming_the_migration(tmp_path):
    shutil.copytree(RESULTS / "task2_api-8", tmp_path / "task2_api-8", ignore=shutil.ignore_patterns(STUDY_FILE))
    with pytest.raises(StudyFileError) as err:
        layer.Results.load(tmp_path)
    assert "task2_api-8" in str(err.value) and MIGRATION in str(err.value)


def test_a_study_file_of_harness_study_reads_as_the_same_type():
    study = read_study(RESULTS / "task2_api-4_rate16")
    assert (study.kind, study.task, study.api_servers, study.budgets, study.rates) == (
        "study", "task2", 4, (512, 1024, 2048, 4096, 8192), ("16",))
    assert study.hosts == ("2de97541-0366-49cf-b423-8d6fd047a5fe",)


RENAMED = ("task2", "task2_api-1", "task2_api-4", "task2_api-4_budgets", "task2_api-8", "task3_api-4",
           "task3_api-4_heavy", "replay_api-4", "replay_api-4_heavy", "replay_budgets_api-4", "replay_screen_api-4")


def renamed_copy(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """The same folders twice: under their names, and under names that say nothing (in the same
    sorted order), the study files' ``replays_of`` following the new names."""
    names = {old: f"fld{i:02d}q" for i, old in enumerate(sorted(RENAMED))}
    same, other = tmp_path / "same", tmp_path / "other"
    for old, new in names.items():
        ignore = shutil.ignore_patterns("logs")
        shutil.copytree(RESULTS / old, same / old, ignore=ignore)
        shutil.copytree(RESULTS / old, other / new, ignore=ignore)
        path = other / new / STUDY_FILE
        data = json.loads(path.read_text())
        data["study"]["replays_of"] = [names[f] for f in data["study"]["replays_of"]]
        path.write_text(json.dumps(data))
    return same, other, names


def test_the_report_reads_roles_from_study_files_not_names(tmp_path):
    """Folders renamed to names that say nothing keep their roles, and the report is the same
    report with the names swapped back."""
    same, other, names = renamed_copy(tmp_path)
    a, b = layer.Results.load(same), layer.Results.load(other)
    for task in ("task2", "task3", "replay"):
        assert [names[f] for f in a.folders(task)] == b.folders(task)
    for role in ("handout-setting", "frontend-study", "replay-validation", "budget-replays", "screen"):
        assert [names[f] for f in a.with_role(role)] == b.with_role(role) != []
    assert list(frontend.lift_rows(b)["folder"]) == [names[f] for f in frontend.lift_rows(a)["folder"]]
    assert [names[f] for f in slo.capacity_folders(a)] == slo.capacity_folders(b)
    assert f"`results/{names['replay_budgets_api-4']}/`" in replay.budget_replay_fact(b)
    for results in (same, other):
        assert plot_results.main(["--results", str(results)]) == 0
    def plain(text: str) -> str:  # tables are padded to their widest cell, which the names change
        return re.sub(r":?-{3,}:?", "-", re.sub(r" +", " ", text))

    text = (other / "REPORT.md").read_text()
    for old, new in names.items():
        text = text.replace(new, old)
    assert plain(text) == plain((same / "REPORT.md").read_text())
