"""tests/conftest.py's order of the suite: the worlds' groups first (the suite's world, then SLURM), the other slow
tests next, the quick ones last, and pytest-xdist keeps that order under ``--dist loadgroup``."""

from __future__ import annotations

from types import SimpleNamespace

import conftest
import pytest


class Item:
    """What the hook reads of a collected test: its fixtures, its marks."""

    def __init__(self, name: str, fixtures: tuple[str, ...] = (), slow: bool = False):
        self.name, self.fixturenames, self.marks = name, list(fixtures), [pytest.mark.slow.mark] if slow else []

    def get_closest_marker(self, name: str):
        return next((m for m in self.marks if m.name == name), None)

    def add_marker(self, mark) -> None:
        self.marks.append(mark.mark)


def test_the_worlds_go_first_then_the_slow_tests_then_the_quick_ones():
    items = [Item("quick_a"), Item("slow_sweep", slow=True), Item("plans", ("checkout",)),
             Item("on_slurm", ("slurm_env",), slow=True), Item("quick_b"), Item("world", ("suite_world",), slow=True),
             Item("shuffled", ("shuffled_world",), slow=True), Item("slow_rehearsal", slow=True)]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.name for i in items] == ["world", "shuffled", "on_slurm", "slow_sweep", "slow_rehearsal", "quick_a",
                                       "plans", "quick_b"]
    groups = {i.name: [m.kwargs.get("name", m.args[0] if m.args else None) for m in i.marks if m.name == "xdist_group"]
              for i in items}
    assert groups["world"] == groups["shuffled"] == ["suite_world"] and groups["on_slurm"] == ["slurm"]
    assert groups["slow_sweep"] == groups["quick_a"] == []


@pytest.mark.parametrize("dist, kept", [("loadgroup", True), ("load", False)])
def test_xdist_keeps_that_order_under_loadgroup(dist, kept, monkeypatch):
    for var in ("OMP_WAIT_POLICY", *conftest.THREAD_VARIABLES):
        monkeypatch.setenv(var, "1")   # pytest_configure sets them where unset: leave this process's as they are
    options = {"numprocesses": 2, "dist": dist}
    config = SimpleNamespace(pluginmanager=SimpleNamespace(hasplugin=lambda name: name == "xdist"),
                             getoption=lambda name, default=None: options.get(name, default),
                             option=SimpleNamespace(loadscopereorder=True))
    conftest.pytest_configure(config)
    assert config.option.loadscopereorder is not kept
