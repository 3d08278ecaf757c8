"""Background preparation of the explorer's hidden tabs: order, failures, sharing between threads."""

from __future__ import annotations

import threading
import time

import pandas as pd
import panel as pn

from perfkit.widgets import warmup as module
from perfkit.widgets.warmup import Warmup


def test_tasks_run_in_order_in_a_thread_of_their_own_after_the_delay():
    seen = []
    job = Warmup(delay_s=0.2)
    job.add(lambda: seen.append(("first", threading.current_thread().name, time.monotonic())))
    job.add(lambda: 1 / 0)  # a failure is left for the tab: the next task still runs
    job.add(lambda: seen.append(("last", threading.current_thread().name, time.monotonic())))
    started = time.monotonic()
    job.start()
    job.start()  # once only
    assert not seen
    assert job.done.wait(10)
    assert [name for name, _, _ in seen] == ["first", "last"]
    assert {thread for _, thread, _ in seen} == {"perfkit-warmup"}
    assert seen[0][2] - started >= 0.2


def _recording(calls: list, real):
    """``real`` that appends the calling thread's name to ``calls``, except in threads alive before (other tests'
    explorers: their background work waits up to ``SHOWN_TIMEOUT_S`` for a page and may call ``real`` later)."""
    earlier = set(threading.enumerate()) - {threading.main_thread()}

    def record(*args, **kwargs):
        if threading.current_thread() not in earlier:
            calls.append(threading.current_thread().name)
        return real(*args, **kwargs)

    return record


def _explored_once_prepared(series, calls: list, monkeypatch) -> pn.Tabs:
    """The explorer's tabs for ``series``, once its background work has made its first call (``calls``, filled by
    the function under test, at most 60 s later)."""
    from perfkit.widgets import explorer

    monkeypatch.setattr(module, "START_DELAY_S", 0.0)
    layout = explorer.explore(series)
    layout.get_root()
    deadline = time.monotonic() + 60
    while not calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert calls == ["perfkit-warmup"]
    return layout.select(pn.Tabs)[0]


def test_the_explorer_diagnoses_the_run_in_the_background_and_the_findings_tab_reuses_it(monkeypatch):
    import perfkit
    from perfkit.widgets import results
    from tests.helpers import ROOT

    series = perfkit.open_runs([ROOT / "data" / "synthetic" / n / "slt.mpinside" for n in ("48", "96")])
    calls = []
    monkeypatch.setattr(results, "diagnose", _recording(calls, results.diagnose))
    tabs = _explored_once_prepared(series, calls, monkeypatch)
    tabs.active = list(tabs._names).index("findings")
    assert calls == ["perfkit-warmup"]  # shown: drawn from the background's findings
    assert "Findings for 48/slt on every rank" in tabs[tabs.active].select(pn.pane.Markdown)[0].object


def test_the_work_waits_until_the_page_shows_the_dashboard():
    seen, shown = [], threading.Event()
    job = Warmup(delay_s=0.1, shown=shown.is_set)
    job.add(lambda: seen.append(time.monotonic()))
    job.start()
    time.sleep(0.5)
    assert not seen  # the delay is long past, the page does not show the dashboard yet
    at = time.monotonic()
    shown.set()
    assert job.done.wait(10)
    assert seen[0] - at >= 0.1


def test_a_dashboard_never_shown_is_prepared_after_the_timeout(monkeypatch):
    monkeypatch.setattr(module, "SHOWN_TIMEOUT_S", 0.3)
    job = Warmup(delay_s=0, shown=lambda: False)
    job.add(lambda: None)
    job.start()
    assert job.done.wait(10)


def test_shown_once_the_page_has_a_view_of_the_dashboards_widget():
    from panel.io.notebook import ipywidget

    dashboard, other = pn.Column(pn.pane.Markdown("dashboard")), pn.Column(pn.pane.Markdown("other"))
    assert not module.shown_through_ipywidgets(dashboard)
    widget = ipywidget(dashboard)  # as panel displays it with ipywidgets comms
    shown_other = ipywidget(other)
    shown_other._view_count = 1
    assert not module.shown_through_ipywidgets(dashboard)  # made, not yet in a page; another one is
    widget._view_count = 1  # the page's widget manager made a view of it
    assert module.shown_through_ipywidgets(dashboard)


def test_the_explorer_prepares_the_scaling_table_in_the_background_and_the_tab_reuses_it(monkeypatch):
    """On a lazy store each scaling table is a pass over the cube: the first view's is computed once, in the
    background, and a choice made again is not computed again."""
    import perfkit
    from perfkit.widgets import scaling as tab
    from tests.helpers import ROOT

    series = perfkit.open_runs([ROOT / "data" / "synthetic" / n / "slt.mpinside" for n in ("48", "96", "192")])
    calls, tables = [], []
    real = tab.scaling
    monkeypatch.setattr(tab, "scaling", _recording(calls, lambda *a, **kw: tables.append(real(*a, **kw)) or tables[-1]))
    tabs = _explored_once_prepared(series, calls, monkeypatch)
    tabs.active = list(tabs._names).index("scaling")
    shown = tabs[tabs.active]
    assert calls == ["perfkit-warmup"]  # shown: drawn from the background's table
    metric = next(w for w in shown.select(pn.widgets.Select) if w.name == "metric")
    metric.value = metric.options[1]
    assert calls == ["perfkit-warmup", "MainThread"]
    metric.value = metric.options[0]
    assert calls == ["perfkit-warmup", "MainThread"]  # chosen again: kept
    # the first view's table: every run's time, as scaling gives it for the series
    pd.testing.assert_frame_equal(tables[0], real(series, by="system", metric=metric.options[0]))


def test_a_stopped_preparation_runs_no_further_task_and_ends_without_waiting_for_the_page():
    seen = []
    waiting = Warmup(delay_s=0.0, shown=lambda: False)  # a page that never comes: up to SHOWN_TIMEOUT_S
    waiting.add(lambda: seen.append("waiting"))
    waiting.start()
    waiting.stop()
    assert waiting.done.wait(module.SHOWN_TIMEOUT_S / 3)
    running = Warmup(delay_s=0.0)
    release = threading.Event()
    running.add(lambda: seen.append("first") or release.wait(10))
    running.add(lambda: seen.append("second"))
    running.start()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    running.stop()  # while its first task runs
    release.set()
    assert running.done.wait(10)
    assert seen == ["first"]
