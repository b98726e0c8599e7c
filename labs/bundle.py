"""The autograder a course uploads to Gradescope: one zip per lab and track.

Gradescope unpacks the zip in /autograder/source, runs its ``setup.sh`` once to build the
image and its ``run_autograder`` once per submission (labs/gradescope/, with the lab and
track written in). The zip holds the fork's last commit (its hidden tests and their
calls included: the image is the instructor's, the sandbox inside it is what keeps them
from the student), never a file the instructor did not commit.
"""

from __future__ import annotations

import io
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path

from labs.catalog import LABS_DIR, Lab, Track
from labs.skeleton import SkeletonError

SCRIPTS = LABS_DIR / "gradescope"
EXECUTABLE = stat.S_IFREG | 0o755
"""The Unix mode of the scripts' zip entries: a file, rwxr-xr-x."""


def make_bundle(fork: Path, lab: Lab, track: Track, out: Path) -> list[str]:
    """Write the autograder zip of ``lab``'s ``track`` from ``fork``'s last commit to ``out``; its entries."""
    try:
        archive = subprocess.run(["git", "-C", str(fork), "archive", "--format=tar", "HEAD"], capture_output=True, check=True).stdout
    except subprocess.CalledProcessError as error:
        raise SkeletonError(f"{fork} is not a git checkout with a commit: {error.stderr.decode(errors='replace').strip()}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    names = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bundle, tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            if member.isfile():
                entry = zipfile.ZipInfo(member.name, date_time=(1980, 1, 1, 0, 0, 0))
                entry.external_attr = (stat.S_IFREG | member.mode & 0o777) << 16
                bundle.writestr(entry, tar.extractfile(member).read(), zipfile.ZIP_DEFLATED)  # type: ignore[union-attr]
                names.append(member.name)
        for script in ("setup.sh", "run_autograder"):
            text = (SCRIPTS / script).read_text().replace("@LAB@", str(lab.number)).replace("@TRACK@", track.name)
            entry = zipfile.ZipInfo(script, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = EXECUTABLE << 16
            bundle.writestr(entry, text, zipfile.ZIP_DEFLATED)
            names.append(script)
    return names
