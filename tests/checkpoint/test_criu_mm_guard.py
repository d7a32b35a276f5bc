"""A dump CRIU calls successful whose images could not be restored is caught
(``criu.tasks_without_mm``, checked by ``criu.dump`` before anything is published).

CRIU 4.2.1 can exit 0 when it cannot name a task's executable (criu/cr-dump.c
``dump_task_mm``: ``goto err`` with ``ret`` still 0), leaving that task without its
``mm-N.img``. Met for real in an ordinary user's namespaces (a first process that was a fork
of an interpreter exec'd before its mount namespace was made; clawpoint's init no longer
is); the same tree in root's user namespace makes CRIU fail properly, so no test here can
make CRIU do it on demand: the check is tested on an image directory's names.
"""

from __future__ import annotations

from pathlib import Path

from core.checkpoint import criu


def test_a_whole_image_has_every_memory_layout(tmp_path: Path) -> None:
    for name in ("core-1.img", "core-2.img", "mm-1.img", "mm-2.img", "pagemap-1.img",
                 "pagemap-2.img", "pagemap-shmem-87430.img", "pstree.img"):  # fmt: skip
        (tmp_path / name).write_bytes(b"")
    assert criu.tasks_without_mm(tmp_path) == []
    (tmp_path / "mm-1.img").unlink()
    assert criu.tasks_without_mm(tmp_path) == ["1"]
