"""Which folder a run writes its results to: a new one of its own, or the run it resumes.

A new folder is created with a plain ``mkdir`` (no ``exist_ok``), which the kernel does
atomically: of two runs started in the same second, one gets ``<stamp>`` and the other
``<stamp>-2``, so they never write into each other's tables. ``--out`` is claimed the same
way (an existing empty folder is accepted: the user made it for this run).

``--resume`` continues a run only with the config that run was started with: resuming
with another one would append its numbers under the old run's name. The run's
``config.yaml`` is the resolved config (defaults and ``--set`` applied), so it is compared
key by key with the config resolved now, and it is also a config file that resumes
the run exactly (``resume_command``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import yaml

from base.yamlschema import ConfigError, load_yaml
from experiments.storage import STORAGE_ERRNOS, existing_ancestor
from protocol.results_format import CONFIG_FILE, NETWORK_FILE, SUMMARY_FILE, resume_command

if TYPE_CHECKING:
    from experiments.config import Experiment

MAX_SAME_SECOND_RUNS = 1000
DIFFERENCES_SHOWN = 5


def make_parents(path: Path, what: str) -> None:
    """``path``'s missing parent folders. A parent that is a file, missing permission or a
    folder that takes no subfolders (/proc) is bad input: ConfigError naming ``what``; a
    full or read-only disk stays an OSError, which the runner reports as the disk's."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in STORAGE_ERRNOS:
            raise
        blocker = next((parent for parent in path.parents if parent.exists() and not parent.is_dir()), None)
        if blocker is not None:
            raise ConfigError(f"{what}: {blocker} is a file, not a folder") from None
        raise ConfigError(f"{what}: cannot create {exc.filename or path.parent}: {exc.strerror}") from None


def new_run_dir(parent: Path, stamp: str) -> Path:
    """``parent/stamp``, or ``parent/stamp-2``, ``-3``, ... if another run took it first."""
    make_parents(parent / stamp, f"results folder {parent / stamp}")
    for n in range(1, MAX_SAME_SECOND_RUNS + 1):
        candidate = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno in STORAGE_ERRNOS:
                raise
            raise ConfigError(f"results folder {candidate}: cannot create it: {exc.strerror}") from None
        return candidate
    raise ConfigError(f"{parent}: {MAX_SAME_SECOND_RUNS} runs started at {stamp}; choose a folder with --out")


def check_path_names(path: Path, what: str) -> None:
    """ConfigError naming a folder or file name in ``path`` longer than a file system takes
    (NAME_MAX, 255 bytes): mkdir would fail on it only once the run has started."""
    name_max = os.pathconf(path.anchor or ".", "PC_NAME_MAX")
    for part in path.parts:
        length = len(os.fsencode(part))
        if length > name_max:
            raise ConfigError(f"{what}: the name {part[:16]}... is {length} bytes long; a file system takes at most {name_max}")


def check_out_dir(path: Path) -> None:
    """ConfigError where ``claim_out_dir`` would fail, checked without creating anything (for
    --dry-run): a name too long, a file, another run's folder, or a parent that is a file or
    cannot be written."""
    check_path_names(path, f"--out {path}")
    existing = existing_ancestor(path.absolute())
    if existing == path.absolute():
        if not path.is_dir():
            raise ConfigError(f"--out {path}: exists and is not a folder")
        if any(path.iterdir()):
            raise ConfigError(f"--out {path}: folder is not empty (another run's results?); choose a new folder, "
                              f"or continue that run with --resume {path}")
    elif not existing.is_dir():
        raise ConfigError(f"--out {path}: {existing} is a file, not a folder")
    elif not os.access(existing, os.W_OK):
        raise ConfigError(f"--out {path}: cannot create it: {existing} is not writable")


def claim_out_dir(path: Path) -> Path:
    """``--out``: created for this run, or an existing empty folder; never another run's folder."""
    check_path_names(path, f"--out {path}")
    make_parents(path, f"--out {path}")
    try:
        path.mkdir()
    except FileExistsError:
        if not path.is_dir():
            raise ConfigError(f"--out {path}: exists and is not a folder") from None
        if any(path.iterdir()):
            raise ConfigError(
                f"--out {path}: folder is not empty (another run's results?); choose a new folder, "
                f"or continue that run with --resume {path}"
            ) from None
    except OSError as exc:
        if exc.errno in STORAGE_ERRNOS:
            raise
        raise ConfigError(f"--out {path}: cannot create it: {exc.strerror}") from None
    return path


def check_resumable(run_dir: Path, experiment: Experiment, simulated: bool = False) -> None:
    """Raise ConfigError unless ``run_dir`` is a run started with the config resolved now,
    on the same clock (``simulated``: run_experiment.py --simulate; network.json says which
    clock each point it recorded ran on)."""
    recorded_path = run_dir / CONFIG_FILE
    check_path_names(run_dir, f"--resume {run_dir}")
    if not run_dir.is_dir():
        raise ConfigError(f"--resume {run_dir}: no such folder")
    if not recorded_path.is_file():
        raise ConfigError(f"--resume {run_dir}: not a run folder (it has no config.yaml)")
    finished = _finished(run_dir)
    if finished is not None:
        raise ConfigError(f"--resume {run_dir}: nothing to resume: the run finished ({finished}); its record stays as it is")
    network_path = run_dir / NETWORK_FILE
    if network_path.is_file():
        clocks = {bool(point.get("simulated", False)) for point in json.loads(network_path.read_text()).values()}
        if clocks and clocks != {simulated}:
            ran, resume = ("on the simulated clock", "with --simulate") if True in clocks else ("emulated", "without --simulate")
            raise ConfigError(f"--resume {run_dir}: that run ran {ran}; resume it {resume}, so that one run holds one kind of times")
    recorded = load_yaml(recorded_path)  # a corrupt one is a ConfigError naming it, not a traceback
    current = yaml.safe_load(yaml.safe_dump(dict(experiment.data)))  # the form config.yaml is written in
    differences = config_differences(recorded, current)
    if differences:
        shown = "; ".join(differences[:DIFFERENCES_SHOWN])
        more = f"; and {len(differences) - DIFFERENCES_SHOWN} more" if len(differences) > DIFFERENCES_SHOWN else ""
        raise ConfigError(
            f"--resume {run_dir}: that run used another config than {experiment.source} "
            f"({shown}{more}); resume it with {resume_command(run_dir, simulated)}"
        )


def _finished(run_dir: Path) -> str | None:
    """What the summary of a finished run says of it (None: no summary, the run did not finish).

    Its summary is written last, when every repetition has run: resuming it would run
    nothing and write the summary again, with this moment as its start and a duration of
    nothing, losing when and for how long the run really ran."""
    path = run_dir / SUMMARY_FILE
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text())
        return (f"{SUMMARY_FILE}: started {summary['started_utc']}, {summary['duration_s']:g} s, "
                f"verified {json.dumps(summary['verified'])}")
    except (OSError, ValueError, KeyError, TypeError):
        return f"it has a {SUMMARY_FILE}"


def config_differences(recorded: Any, current: Any, key: str = "") -> list[str]:
    """Every dotted key whose value differs, as 'key: <recorded> in the run, <current> now'."""
    if isinstance(recorded, Mapping) and isinstance(current, Mapping):
        differences = []
        for name in sorted(set(recorded) | set(current), key=str):
            child = f"{key}.{name}" if key else str(name)
            if name not in current:
                differences.append(f"{child}: {recorded[name]!r} in the run, not set now")
            elif name not in recorded:
                differences.append(f"{child}: not set in the run, {current[name]!r} now")
            else:
                differences += config_differences(recorded[name], current[name], child)
        return differences
    return [] if recorded == current else [f"{key or '<config>'}: {recorded!r} in the run, {current!r} now"]
