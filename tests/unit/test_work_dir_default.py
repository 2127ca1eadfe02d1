"""LAMBDASERVE_WORK_DIR's default is this user's and this process group's own: two
lambdaserves on one machine never share scratch or cache, one process group does."""

from __future__ import annotations

import os
import subprocess
import sys

from lambdaserve.settings import Settings

PRINT = "from lambdaserve.settings import Settings; print(Settings.from_env({}).work_dir)"


def work_dir_of_child(new_group: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "LAMBDASERVE_WORK_DIR"}
    done = subprocess.run(
        [sys.executable, "-c", PRINT],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        start_new_session=new_group,
    )
    return done.stdout.strip()


def test_the_default_names_the_user_and_the_process_group():
    """Given no LAMBDASERVE_WORK_DIR, Then the default names this uid and process group."""
    default = Settings.from_env({}).work_dir
    assert default.endswith(f"lambdaserve-{os.getuid()}-{os.getpgrp()}")
    assert Settings.from_env({"LAMBDASERVE_WORK_DIR": "/srv/x"}).work_dir == "/srv/x"


def test_another_process_group_gets_another_directory_and_a_child_shares_its_parents():
    """Given two lambdaserves started as two commands (two process groups),
    Then their default work directories differ, while a child in the same group (a model
    code worker) gets its parent's."""
    assert work_dir_of_child(new_group=False) == Settings.from_env({}).work_dir
    assert work_dir_of_child(new_group=True) != Settings.from_env({}).work_dir
