"""The near-miss set (issue 11): pairs that look alike but are different memories, and true
rewordings that are the same memory, through the real store pipeline (SQLite, Qdrant Edge, the
offline MiniLM model).

Distinct pairs differ in the one token that matters (a version, a build or invoice number, a
duration, a latency, an outcome, a date, a hash) or in a look-alike name. Storing the second
of a pair must never drop it (``duplicate``) nor overwrite the first (supersede a *current*
fact through a fuzzy name match). Rewordings (case, punctuation, articles, "on" / "at", unit
spellings) must still be caught: a duplicate event, a duplicate fact, the same entity, the
same predicate. The design's synonym supersede (uses -> depends-on) must still happen.

The test prints the two numbers the issue asks for (run with ``-s`` to see them).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.harness import ServiceFactory

from ferrex.core.errors import FerrexError
from ferrex.core.service import MemoryService
from ferrex.server.calls import run_tool as invoke
from ferrex.server.calls import store_many

# --------------------------------------------------------------------------- the set

DISTINCT_EVENTS = [
    ("deployed build 1.4.2 to staging", "deployed build 1.4.3 to staging"),
    ("CI build #4812 failed on main", "CI build #4813 failed on main"),
    ("invoice INV-2041 was paid by Acme", "invoice INV-2042 was paid by Acme"),
    ("ticket JIRA-881 was closed as fixed", "ticket JIRA-882 was closed as fixed"),
    ("the nightly backup took 42 minutes", "the nightly backup took 97 minutes"),
    (
        "p95 latency of the search API was 120 ms",
        "p95 latency of the search API was 480 ms",
    ),
    ("CI build #4812 passed on main", "CI build #4812 failed on main"),
    ("the canary deploy to eu-west succeeded", "the canary deploy to eu-west failed"),
    ("merged commit 3f9a2c1 into main", "merged commit 8b7e4d0 into main"),
    ("the team standup moved to 9:30 am", "the team standup moved to 10:30 am"),
    ("release planning meeting is on March 5", "release planning meeting is on April 5"),
    ("disk usage on db-2 reached 85%", "disk usage on db-2 reached 95%"),
    (
        "the schema migration finished on 2026-03-01",
        "the schema migration finished on 2026-03-02",
    ),
    (
        "the load test of the checkout service passed",
        "the load test of the checkout service did not pass",
    ),
    (
        "feature flag new-checkout enabled in production",
        "feature flag new-checkout disabled in production",
    ),
    (
        "pull request 412 for the billing service was approved",
        "pull request 412 for the billing service was rejected",
    ),
    ("error rate was 2.5% after the deploy", "error rate was 0.5% after the deploy"),
    ("scaled the api deployment to 3 replicas", "scaled the api deployment to 5 replicas"),
    (
        "the integration tests on the payments branch failed on Monday",
        "the integration tests on the payments branch failed on Tuesday",
    ),
]

REWORDED_EVENTS = [
    ("deployed build 1.4.2 to staging", "Deployed build v1.4.2 to staging."),
    ("CI build #4812 failed on main", "CI build 4812 failed on main"),
    ("the nightly backup took 42 minutes", "The nightly backup took 42 minutes."),
    (
        "user debugged a deadlock in the connection pool by switching to tokio::sync::Semaphore",
        "the user fixed a deadlock in the connection pool by switching to tokio::sync::Semaphore",
    ),
    ("invoice INV-2041 was paid by Acme", "Invoice INV-2041 was paid by ACME."),
    (
        "p95 latency of the search API was 120 ms",
        "the p95 latency of the search API was 120ms",
    ),
    (
        "the team standup moved to 9:30 am on Monday",
        "The team stand-up moved to 9:30am on monday.",
    ),
    (
        "the canary deploy to eu-west succeeded at 14:00",
        "the canary deploy to eu-west succeeded at 2 pm",
    ),
    (
        "the schema migration finished on 2026-03-01",
        "The schema migration finished at 2026-03-01.",
    ),
    ("ticket JIRA-881 was closed as fixed", "Ticket JIRA-881 was closed as fixed!"),
    ("disk usage on db-2 reached 85%", "disk usage on db-2 reached 85 percent"),
    ("scaled the api deployment to 3 replicas", "scaled the API deployment to three replicas"),
    ("merged commit 3f9a2c1 into main", "merged commit 3f9a2c1 into main."),
]

Triple = tuple[str, str, str]

# Both facts must stay current: look-alike subjects, look-alike predicates, distinct names.
DISTINCT_FACTS: list[tuple[Triple, Triple]] = [
    (("auth service", "owned_by", "team-identity"), ("auth server", "owned_by", "team-platform")),
    (("api gateway", "http_port", "8080"), ("api gateway", "https_port", "8443")),
    (("payments-v1", "owned_by", "team-a"), ("payments-v2", "owned_by", "team-b")),
    (("INV-2041", "status", "paid"), ("INV-2042", "status", "overdue")),
    (("build 4812", "result", "failed"), ("build 4813", "result", "passed")),
    (("search api", "p95_latency", "120 ms"), ("search api", "p99_latency", "480 ms")),
    (("worker pool", "max_replicas", "10"), ("worker pool", "min_replicas", "2")),
    (("orders queue", "owned_by", "team-a"), ("order queue", "owned_by", "team-b")),
]

# The second value replaces the first (superseded, the first kept as history), never a
# duplicate that would drop the new value.
VALUE_CHANGES: list[tuple[Triple, Triple]] = [
    (("orders db", "version", "15.2"), ("orders db", "version", "15.3")),
    (("nightly ci", "status", "passing"), ("nightly ci", "status", "failing")),
    (("billing api", "timeout", "30 s"), ("billing api", "timeout", "60 s")),
    (
        ("release train", "next_release", "2026-03-01"),
        ("release train", "next_release", "2026-04-01"),
    ),
]

# The second is the same fact (a duplicate: confirmed, not stored twice).
REWORDED_FACTS: list[tuple[Triple, Triple]] = [
    (("Auth Service", "owned_by", "Team Identity"), ("auth service", "owned_by", "team identity")),
    (("api-server", "uses", "tokio 1.36"), ("api server", "depends-on", "tokio 1.36")),
    (("postgres", "runs_on", "db-2"), ("postgres", "runs-on", "DB-2")),
    (("search api", "p95_latency", "120 ms"), ("search api", "p95 latency", "120 ms")),
]

DISTINCT_NAMES = [
    ("build 1.4.2", "build 1.4.3"),
    ("INV-2041", "INV-2042"),
    ("JIRA-881", "JIRA-882"),
    ("python2", "python3"),
    ("db-2", "db-3"),
    ("node 18", "node 20"),
    ("commit 3f9a2c1", "commit 8b7e4d0"),
    ("q3 report", "q4 report"),
    ("passing tests", "failing tests"),
]

SAME_NAMES = [
    ("API-Server", "api server"),
    ("postgres", "postgresql"),
    ("INV-2041", "inv 2041"),
    ("build #4812", "build 4812"),
]

DISTINCT_PREDICATES = [
    ("p95_latency", "p99_latency"),
    ("http_port", "https_port"),
    ("v1_endpoint", "v2_endpoint"),
    ("q3_revenue", "q4_revenue"),
    ("max_connections", "min_connections"),
    ("passed_at", "failed_at"),
    ("start_date", "end_date"),
]

SAME_PREDICATES = [
    ("depends-on", "depends_on"),
    ("uses", "depends_on"),  # the design's synonym family
    ("http_port", "HTTP-Port"),
    ("runs_version", "version"),
]


# --------------------------------------------------------------------------- helpers


def store(service: MemoryService, arguments: dict[str, Any]) -> dict[str, Any]:
    try:
        return invoke(service, "store", arguments)
    except FerrexError as exc:
        return {"error": exc.to_dict()}


def fact(triple: Triple, namespace: str, **extra: Any) -> dict[str, Any]:
    subject, predicate, value = triple
    return {
        "subject": subject,
        "predicate": predicate,
        "object": value,
        "namespace": namespace,
        **extra,
    }


def current(service: MemoryService, memory_id: str) -> bool:
    memory = service.meta.get_memory(memory_id)
    return memory is not None and memory.t_invalid is None


def entity_of(service: MemoryService, answer: dict[str, Any]) -> int:
    memory = service.meta.get_memory(answer["id"])
    assert memory is not None
    [entity] = memory.entity_ids
    return entity


# --------------------------------------------------------------------------- the measure


def test_near_miss_set_drops_nothing_and_still_catches_rewordings(
    service: MemoryService,
) -> None:
    lost: list[str] = []  # distinct memories dropped or overwritten
    missed: list[str] = []  # rewordings not recognised
    distinct = 0
    rewordings = 0

    for n, (first, second) in enumerate(DISTINCT_EVENTS):
        distinct += 1
        ns = f"event{n}"
        a = store(service, {"content": first, "namespace": ns})
        b = store(service, {"content": second, "namespace": ns})
        if "error" in b or not (current(service, a["id"]) and current(service, b["id"])):
            lost.append(f"event {second!r} after {first!r}: {b}")

    for n, (first, second) in enumerate(REWORDED_EVENTS):
        rewordings += 1
        ns = f"reword{n}"
        a = store(service, {"content": first, "namespace": ns})
        b = store(service, {"content": second, "namespace": ns})
        if b.get("error", {}).get("existing_id") != a["id"]:
            missed.append(f"event {second!r} is not a duplicate of {first!r}: {b}")

    for n, (first, second) in enumerate(DISTINCT_FACTS):
        distinct += 1
        ns = f"fact{n}"
        a = store(service, fact(first, ns))
        b = store(service, fact(second, ns))
        if "error" in b or not (current(service, a["id"]) and current(service, b["id"])):
            lost.append(f"fact {second} after {first}: {b}")

    for n, (first, second) in enumerate(VALUE_CHANGES):
        distinct += 1
        ns = f"value{n}"
        a = store(service, fact(first, ns))
        b = store(service, fact(second, ns))
        if b.get("status") != "superseded" or service.meta.get_memory(a["id"]) is None:
            lost.append(f"value {second} after {first}: {b}")

    for n, (first, second) in enumerate(REWORDED_FACTS):
        rewordings += 1
        ns = f"refact{n}"
        a = store(service, fact(first, ns))
        b = store(service, fact(second, ns))
        if b.get("status") != "duplicate" or b.get("id") != a["id"]:
            missed.append(f"fact {second} is not a duplicate of {first}: {b}")

    for n, (first, second) in enumerate(DISTINCT_NAMES):
        distinct += 1
        ns = f"name{n}"
        a = store(service, {"content": "a note", "entities": [first], "namespace": ns})
        b = store(service, {"content": "another note", "entities": [second], "namespace": ns})
        if "error" in b or entity_of(service, a) == entity_of(service, b):
            lost.append(f"entity {second!r} merged into {first!r}: {b}")

    for n, (first, second) in enumerate(SAME_NAMES):
        rewordings += 1
        ns = f"samename{n}"
        a = store(service, {"content": "a note", "entities": [first], "namespace": ns})
        b = store(service, {"content": "another note", "entities": [second], "namespace": ns})
        if "error" in b or entity_of(service, a) != entity_of(service, b):
            missed.append(f"entity {second!r} is not {first!r}: {b}")

    for n, (first, second) in enumerate(DISTINCT_PREDICATES):
        distinct += 1
        ns = f"pred{n}"
        a = store(service, fact(("svc", first, "alpha"), ns))
        b = store(service, fact(("svc", second, "omega"), ns))
        if "error" in b or not (current(service, a["id"]) and current(service, b["id"])):
            lost.append(f"predicate {second!r} overwrote {first!r}: {b}")

    for n, (first, second) in enumerate(SAME_PREDICATES):
        rewordings += 1
        ns = f"samepred{n}"
        a = store(service, fact(("svc", first, "alpha"), ns))
        b = store(service, fact(("svc", second, "omega"), ns))
        if b.get("status") != "superseded" or b.get("superseded") != [a["id"]]:
            missed.append(f"predicate {second!r} is not {first!r}: {b}")

    caught = rewordings - len(missed)
    print(
        f"\nnear-miss set: {len(lost)} of {distinct} distinct memories dropped or overwritten; "
        f"{caught} of {rewordings} rewordings caught ({caught / rewordings:.1%})"
    )
    assert distinct >= 30 and rewordings >= 15
    assert lost == []
    assert caught / rewordings >= 0.95, missed


# --------------------------------------------------------------------------- the answers


def test_a_look_alike_subject_keeps_both_facts_and_names_the_other(
    service: MemoryService,
) -> None:
    first = invoke(service, "store", fact(("auth service", "owned_by", "team-identity"), "default"))
    second = invoke(service, "store", fact(("auth server", "owned_by", "team-platform"), "default"))
    assert second["status"] == "stored" and "superseded" not in second
    [alias] = second["possible_alias"]
    assert alias["id"] == first["id"] and alias["field"] == "subject"
    assert alias["name"] == "auth server" and alias["other"] == "auth service"
    assert "t_invalid" in alias["hint"] and "supersede" in alias["hint"]
    assert current(service, first["id"]) and current(service, second["id"])
    # The same look-alike name again replaces its own value only.
    third = invoke(service, "store", fact(("auth server", "owned_by", "team-core"), "default"))
    assert third["superseded"] == [second["id"]]
    assert [a["id"] for a in third["possible_alias"]] == [first["id"]]
    assert current(service, first["id"]) and not current(service, second["id"])
    # The exact name supersedes its own fact as before, and leaves the look-alike's alone.
    fourth = invoke(service, "store", fact(("auth service", "owned_by", "team-access"), "default"))
    assert fourth["superseded"] == [first["id"]] and current(service, third["id"])


def test_a_look_alike_predicate_is_a_relation_of_its_own(service: MemoryService) -> None:
    http = invoke(service, "store", fact(("api gateway", "http_port", "8080"), "default"))
    https = invoke(service, "store", fact(("api gateway", "https_port", "8443"), "default"))
    assert https["status"] == "stored"
    assert service.meta.get_memory(https["id"]).predicate_canonical == "httpsport"
    assert https["possible_alias"][0]["field"] == "predicate"
    assert https["possible_alias"][0]["other"] == "http_port"
    again = invoke(service, "store", fact(("api gateway", "https_port", "9443"), "default"))
    assert again["status"] == "superseded" and again["superseded"] == [https["id"]]
    assert "possible_alias" not in again
    assert current(service, http["id"])
    # Look-alikes are not contradictions of each other.
    assert invoke(service, "reflect", {"namespace": "default"})["contradictions"] == []


def test_the_design_synonym_supersede_is_unchanged(service: MemoryService) -> None:
    old = invoke(
        service, "store", fact(("api-server", "uses", "tokio 1.36"), "default", confidence=0.9)
    )
    new = invoke(
        service,
        "store",
        fact(("api-server", "depends-on", "tokio 1.38"), "default", confidence=0.95),
    )
    assert new["status"] == "superseded" and new["superseded"] == [old["id"]]
    assert "possible_alias" not in new
    assert not current(service, old["id"])


def test_a_same_value_under_a_look_alike_name_is_still_a_duplicate(
    service: MemoryService,
) -> None:
    first = invoke(service, "store", fact(("auth service", "owned_by", "team-identity"), "default"))
    again = invoke(service, "store", fact(("auth server", "owned_by", "team-identity"), "default"))
    assert again["status"] == "duplicate" and again["id"] == first["id"]


@pytest.mark.parametrize(
    ("first", "second"),
    [DISTINCT_EVENTS[0], DISTINCT_EVENTS[1], DISTINCT_EVENTS[6]],
)
def test_items_of_one_batch_that_differ_in_a_token_are_both_stored(
    make_service: ServiceFactory, first: str, second: str
) -> None:
    service = make_service()
    answers = store_many(service, [{"content": first}, {"content": second}])
    assert [a.get("status") for a in answers] == ["stored", "stored"]
