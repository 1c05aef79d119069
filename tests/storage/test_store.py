"""The ``Store`` is the one door: every public method states whether it rides out a database
restart, the tokens and the service's counts go through it, and its trials' version moves
with every row added or state written."""

from __future__ import annotations

import inspect

from tuner.storage import JobState, Store, TrialState
from tuner.storage._retry import retry_db


def _public_methods() -> dict[str, object]:
    return {
        n: f
        for n, f in inspect.getmembers(Store, callable)
        if not n.startswith("_") and not inspect.isclass(f)
    }


def test_every_public_method_says_whether_it_retries():
    """``retry_db`` or ``no_retry`` on each, never both, never neither: a new method that
    forgets to choose fails here rather than in a database restart."""
    chosen = {
        n: (getattr(f, "__retry_db__", False), getattr(f, "__no_retry__", False))
        for n, f in _public_methods().items()
    }
    assert {n for n, c in chosen.items() if c.count(True) != 1} == set()
    once = {n for n, (retried, _) in chosen.items() if not retried}
    # the plumbing, the job-and-study pairs, and what answers a request or scrape at once
    assert once == {
        "session",
        "create_job",
        "delete_job",
        "create_token",
        "list_tokens",
        "revoke_token",
        "service_counts",
        "fail_refused_jobs",  # a loop of retried compare-and-sets
        "load_study",  # through the restart-riding storage, which retries each read
    }
    # the finders and writes the retry was patched onto before it was written at each one
    # token_state waits like the route it guards (the API's store: db_retry_s)
    for name in (
        "trials",
        "job",
        "trial_records",
        "request_cancel",
        "replace_measurements",
        "token_state",
    ):
        assert chosen[name] == (True, False), name


def test_retry_db_marks_what_it_wraps():
    def f(self):
        return 1

    assert retry_db(f).__retry_db__ and retry_db(f).__wrapped__ is f


def test_tokens_and_counts_go_through_the_store(db_url):
    store = Store(db_url)
    store.ensure_schema()
    assert store.token_state(None) == (False, False)
    info, token = store.create_token("ci")
    assert info.name == "ci" and info.active
    assert store.token_state(token) == (True, True)
    assert [t.name for t in store.list_tokens()] == ["ci"]
    assert not store.revoke_token("ci").active
    assert store.token_state(token) == (True, False)
    c = store.service_counts()
    assert c.jobs_by_state == {} and c.engine_launches == 0


def test_states_are_written_and_read_as_the_stored_strings(db_url, space_dir):
    from tests.fake_space import _space
    from tuner.job import create_job

    store = Store(db_url)
    jid = create_job(store, _space(space_dir))
    assert store.job(jid).state == JobState.QUEUED == "queued"
    assert store.service_counts().jobs_by_state == {"queued": 1}
    store.start_job(jid)
    assert store.job(jid).state == "running"
    tid = store.add_trial(jid, 0, method="none", params={}, engine_config={}, engine_key="k")
    assert store.trial_state(jid, 0) == TrialState.RUNNING == "running"
    store.fail_orphaned_trials(jid)
    assert store.trial(jid, 0).state == "fail" and store.trial(jid, 0).trial_id == tid


def test_the_trials_version_moves_with_each_row_and_state(db_url, space_dir):
    from tests.fake_space import _space
    from tuner.job import create_job

    store = Store(db_url)
    jid = create_job(store, _space(space_dir))
    v0 = store.trials_version(jid)
    assert v0 == (0, 0, None)
    tid = store.add_trial(jid, 0, method="none", params={}, engine_config={}, engine_key="k")
    v1 = store.trials_version(jid)
    assert v1[:2] == (1, 0)
    store.set_trial_log(tid, "x.log")  # nothing the search reads: the same version
    assert store.trials_version(jid) == v1
    store.store_results(tid, [], {}, state="complete")
    v2 = store.trials_version(jid)
    assert v2[:2] == (1, 1) and v2[2] is not None
    store.finish_trial(tid, "fail", reason="crash")  # a state written again
    assert store.trials_version(jid) != v2
