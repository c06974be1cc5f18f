"""Following the configuration Secret: the pure parts (URLs, decoding, the change decision, in-cluster access), then
the follower against a stand-in API (`mcpg_testing.secret_api`) for what a real API server will not do on demand:
410s, refusals, malformed and endless lines, a stream cut mid-event."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mcpg_gateway import config_secret
from mcpg_gateway.config_secret import ApiAccess, FollowError, KeyUnreadable, ResourceVersionExpired, SecretFollower
from mcpg_testing import BOUND_S
from mcpg_testing.secret_api import NAMESPACE, SecretApi, bookmark, error, event, secret, serving

NAME, KEY = "mcpg-gateway-config", "gateway.yaml"
TOKEN = "sa-token-not-for-logs"


def access(server: str = "https://10.0.0.1:443", token_file: Path = Path("/t")) -> ApiAccess:
    return ApiAccess(server, NAMESPACE, token_file, None)


def config(version: str, text: bytes) -> dict[str, object]:
    return secret(NAME, version, {KEY: text})


# -- URLs ---------------------------------------------------------------------------------------------------------


def test_a_list_names_the_secret_by_an_encoded_field_selector_in_its_namespace() -> None:
    url = config_secret.list_url(access("https://10.0.0.1:443/"), NAME)

    assert url == f"https://10.0.0.1:443/api/v1/namespaces/{NAMESPACE}/secrets?fieldSelector=metadata.name%3D{NAME}"


def test_a_watch_resumes_from_a_version_with_bookmarks_and_a_server_side_timeout() -> None:
    url = config_secret.watch_url(access(), NAME, "42", 300)

    _, _, query = url.partition("?")
    assert query.split("&") == [
        f"fieldSelector=metadata.name%3D{NAME}",
        "watch=true",
        "resourceVersion=42",
        "allowWatchBookmarks=true",
        "timeoutSeconds=300",
    ]


# -- decoding -----------------------------------------------------------------------------------------------------


def test_an_added_or_modified_event_carries_the_secret_and_its_resource_version() -> None:
    decoded = config_secret.decode_event(event("MODIFIED", config("7", b"a")))

    assert (decoded.type, decoded.version) == ("MODIFIED", "7")
    assert config_secret.key_text(decoded.secret, KEY) == "a"


def test_a_bookmark_carries_only_a_resource_version() -> None:
    decoded = config_secret.decode_event(bookmark("9"))

    assert (decoded.type, decoded.version) == ("BOOKMARK", "9")


def test_a_deleted_event_decodes_with_the_version_of_the_deletion() -> None:
    decoded = config_secret.decode_event(event("DELETED", config("11", b"a")))

    assert (decoded.type, decoded.version) == ("DELETED", "11")


def test_an_error_event_410_means_the_version_expired() -> None:
    with pytest.raises(ResourceVersionExpired):
        config_secret.decode_event(error(410, "Expired"))


def test_another_error_event_is_a_failure_naming_its_code_and_reason() -> None:
    with pytest.raises(FollowError, match=r"code 500, reason 'InternalError'") as caught:
        config_secret.decode_event(error(500, "InternalError"))
    assert caught.value.kind == "error event 500"
    assert not isinstance(caught.value, ResourceVersionExpired)


@pytest.mark.parametrize(
    "line",
    [
        b'{"type": "MODIFIED", "object": {"data": {"k": "c2VjcmV0"}',  # cut short
        b"[1, 2]",
        b'{"type": "MODIFIED"}',
        b'{"type": "SURPRISE", "object": {"metadata": {"resourceVersion": "1"}}}',
        b'{"type": "MODIFIED", "object": {"metadata": {}, "data": {"k": "c2VjcmV0"}}}',
        b"[" * 100_000,
    ],
)
def test_a_malformed_line_is_refused_without_quoting_it(line: bytes) -> None:
    with pytest.raises(FollowError) as caught:
        config_secret.decode_event(line)

    assert caught.value.kind == "malformed"
    assert "c2VjcmV0" not in str(caught.value)


def test_a_list_answer_holds_the_secret_or_nothing_and_the_version_to_watch_from() -> None:
    found = config_secret.decode_list(b'{"metadata": {"resourceVersion": "5"}, "items": [{"metadata": {}}]}')
    absent = config_secret.decode_list(b'{"metadata": {"resourceVersion": "6"}, "items": []}')

    assert (found.version, found.secret) == ("5", {"metadata": {}})
    assert (absent.version, absent.secret) == ("6", None)
    with pytest.raises(FollowError, match="at most one"):
        config_secret.decode_list(b'{"metadata": {"resourceVersion": "6"}, "items": [{}, {}]}')


def test_the_text_of_a_key_is_its_base64_decoded_as_utf8() -> None:
    assert config_secret.key_text(config("1", "grüße: 1\n".encode()), KEY) == "grüße: 1\n"


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (secret(NAME, "1", None), "has no key"),
        (secret(NAME, "1", {"other.yaml": b"x"}), "has no key"),
        (secret(NAME, "1", {KEY: b"\xff\xfe binary"}), "not UTF-8"),
        ({"metadata": {}, "data": {KEY: "not base64!"}}, "not base64"),
    ],
)
def test_a_key_that_is_missing_or_not_text_is_unreadable_and_its_bytes_are_not_quoted(
    obj: dict[str, object], reason: str
) -> None:
    with pytest.raises(KeyUnreadable, match=reason) as caught:
        config_secret.key_text(obj, KEY)

    assert "xff" not in str(caught.value)
    assert caught.value.__cause__ is None


def test_the_same_text_is_not_a_change_and_any_other_or_a_first_one_is() -> None:
    assert config_secret.is_change(None, "a")
    assert config_secret.is_change("a", "b")
    assert not config_secret.is_change("a", "a")


def test_a_403_says_which_permission_on_which_secret_is_missing() -> None:
    failure = config_secret.status_failure(403, "watch", NAME, access())

    assert failure is not None
    assert f"may not watch secrets named '{NAME}' in namespace '{NAMESPACE}'" in str(failure)
    assert "get, list and watch" in str(failure)


def test_statuses_map_to_kinds_of_failure_and_410_to_listing_again() -> None:
    assert config_secret.status_failure(200, "list", NAME, access()) is None
    assert isinstance(config_secret.status_failure(410, "watch", NAME, access()), ResourceVersionExpired)
    kinds = {s: getattr(config_secret.status_failure(s, "list", NAME, access()), "kind", None) for s in (401, 503)}
    assert kinds == {401: "401", 503: "http 503"}


# -- lines --------------------------------------------------------------------------------------------------------


def test_lines_are_split_across_chunks_and_empty_ones_skipped() -> None:
    lines = config_secret.Lines(limit=100)

    assert lines.feed(b'{"a"') == []
    assert lines.feed(b': 1}\n\n{"b": 2}\n{"c"') == [b'{"a": 1}', b'{"b": 2}']
    with pytest.raises(FollowError, match="in the middle"):
        lines.end()


def test_a_line_longer_than_the_limit_is_refused_before_it_is_held_whole() -> None:
    lines = config_secret.Lines(limit=10)
    lines.feed(b"12345678")

    with pytest.raises(FollowError, match="longer than 10 bytes") as caught:
        lines.feed(b"9abc")
    assert caught.value.kind == "too long"
    with pytest.raises(FollowError):
        config_secret.Lines(limit=10).feed(b"0123456789ab\n")  # complete, in one chunk, and still too long


# -- in-cluster access ---------------------------------------------------------------------------------------------


def service_account(root: Path, namespace: str = "shop\n") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("token", "tok"), ("ca.crt", "---"), ("namespace", namespace)):
        (root / name).write_text(text)
    return root


def test_in_cluster_access_comes_from_the_service_environment_and_the_service_account_files(tmp_path: Path) -> None:
    root = service_account(tmp_path / "sa")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}

    assert ApiAccess.in_cluster(environ, root) == ApiAccess(
        "https://10.0.0.1:443", "shop", root / "token", root / "ca.crt"
    )


def test_an_ipv6_service_host_is_put_in_brackets(tmp_path: Path) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}

    assert ApiAccess.in_cluster(environ, service_account(tmp_path)).server == "https://[fd00::1]:6443"


def test_outside_a_pod_the_error_names_everything_missing(tmp_path: Path) -> None:
    with pytest.raises(config_secret.NotInClusterError) as caught:
        ApiAccess.in_cluster({"KUBERNETES_SERVICE_PORT": "443"}, tmp_path)

    message = str(caught.value)
    assert "KUBERNETES_SERVICE_HOST" in message
    assert "KUBERNETES_SERVICE_PORT" not in message
    assert all(str(tmp_path / name) in message for name in ("token", "ca.crt", "namespace"))


def test_an_empty_namespace_file_is_refused(tmp_path: Path) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}

    with pytest.raises(config_secret.NotInClusterError, match="empty"):
        ApiAccess.in_cluster(environ, service_account(tmp_path, namespace="\n"))


# -- the follower, against the stand-in ---------------------------------------------------------------------------


@dataclass
class Following:
    api: SecretApi
    follower: SecretFollower
    token_file: Path
    offers: asyncio.Queue[tuple[str, str]] = field(default_factory=asyncio.Queue)
    attempts: list[int] = field(default_factory=list)
    """Every backoff asked for, by its attempt number: the delays themselves are 0 here."""
    failed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at the first backoff."""

    async def next_offer(self) -> tuple[str, str]:
        async with asyncio.timeout(BOUND_S):
            return await self.offers.get()


@contextlib.asynccontextmanager
async def following(tmp_path: Path, api: SecretApi) -> AsyncIterator[Following]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    attempts: list[int] = []
    failed = asyncio.Event()
    offers: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def offer(text: str, version: str) -> None:
        offers.put_nowait((text, version))

    def backoff(attempt: int) -> float:
        attempts.append(attempt)
        failed.set()
        return 0.0

    follower = SecretFollower(NAME, KEY, offer, access(api.url, token_file), backoff=backoff)
    task = asyncio.create_task(follower.run())
    try:
        yield Following(api, follower, token_file, offers, attempts, failed)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def api() -> AsyncIterator[SecretApi]:
    async with serving() as api:
        yield api


async def test_the_listed_text_is_offered_then_each_edit_from_a_watch_at_the_lists_version(
    tmp_path: Path, api: SecretApi
) -> None:
    api.items, api.version = [config("5", b"a: 1")], "7"
    async with following(tmp_path, api) as f:
        assert await f.next_offer() == ("a: 1", "5")
        assert f.follower.synced.is_set()
        watch = await api.next_watch()
        watch.send(event("MODIFIED", config("8", b"a: 2")))
        assert await f.next_offer() == ("a: 2", "8")

    assert watch.query | {"timeoutSeconds": "-"} == {
        "fieldSelector": f"metadata.name={NAME}",
        "watch": "true",
        "resourceVersion": "7",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "-",
    }
    assert api.requests[0].raw_query == f"fieldSelector=metadata.name%3D{NAME}"
    assert {r.token for r in api.requests} == {TOKEN}


async def test_the_same_text_is_not_offered_twice_and_a_bookmark_only_moves_the_version(
    tmp_path: Path, api: SecretApi
) -> None:
    api.items, api.version = [config("5", b"a")], "5"
    async with following(tmp_path, api) as f:
        await f.next_offer()
        watch = await api.next_watch()
        other_key_edited = secret(NAME, "6", {KEY: b"a", "notes": b"x"})
        watch.send(event("MODIFIED", other_key_edited), bookmark("9"), event("MODIFIED", config("10", b"b")))
        assert await f.next_offer() == ("b", "10")
        watch.send(bookmark("12"))
        watch.end()
        assert (await api.next_watch()).query["resourceVersion"] == "12"
        assert f.offers.empty()
    assert api.kinds() == ["list", "watch", "watch"]


async def test_a_watch_the_server_ended_resumes_from_the_last_version_without_listing(
    tmp_path: Path, api: SecretApi
) -> None:
    api.items, api.version = [config("5", b"a")], "5"
    async with following(tmp_path, api) as f:
        await f.next_offer()
        watch = await api.next_watch()
        watch.send(event("MODIFIED", config("6", b"b")))
        await f.next_offer()
        watch.end()
        resumed = await api.next_watch()
    assert resumed.query["resourceVersion"] == "6"
    assert api.kinds() == ["list", "watch", "watch"]
    assert f.attempts == []


async def test_an_expired_version_in_an_error_event_lists_again_at_once_and_offers_only_a_change(
    tmp_path: Path, api: SecretApi
) -> None:
    api.items, api.version = [config("5", b"a")], "5"
    async with following(tmp_path, api) as f:
        await f.next_offer()
        watch = await api.next_watch()
        watch.send(event("MODIFIED", config("6", b"a: edited")))
        await f.next_offer()
        api.items, api.version = [config("6", b"a: edited")], "20"  # unchanged since, as the relist will show
        watch.send(error(410, "Expired"))
        assert (await api.next_watch()).query["resourceVersion"] == "20"
        assert f.offers.empty()  # the relist came back with the text already offered

    assert api.kinds() == ["list", "watch", "list", "watch"]
    assert f.attempts == []


async def test_an_http_410_on_a_watch_lists_again_and_offers_what_changed_meanwhile(
    tmp_path: Path, api: SecretApi
) -> None:
    api.items, api.version = [config("5", b"a")], "5"
    async with following(tmp_path, api) as f:
        await f.next_offer()
        watch = await api.next_watch()
        api.refusals = [410]
        api.items, api.version = [config("30", b"b")], "31"
        watch.send(bookmark("6"))
        watch.end()
        assert await f.next_offer() == ("b", "30")
        assert (await api.next_watch()).query["resourceVersion"] == "31"
    assert api.kinds() == ["list", "watch", "watch", "list", "watch"]


async def test_failures_back_off_further_each_time_and_are_warned_once_per_kind_never_with_token_or_text(
    tmp_path: Path, api: SecretApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=config_secret.__name__)
    api.items, api.refusals = [config("5", b"text-not-for-logs")], [500, 500, 403, 401]
    async with following(tmp_path, api) as f:
        assert await f.next_offer() == ("text-not-for-logs", "5")

    assert f.attempts == [0, 1, 2, 3]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert "answered 500 to a list" in warnings[0]
    assert f"may not list secrets named '{NAME}' in namespace '{NAMESPACE}'" in warnings[1]
    assert "refused the token" in warnings[2]
    assert any("answers again" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    for record in caplog.records:
        assert TOKEN not in record.getMessage()
        assert "text-not-for-logs" not in record.getMessage()
        assert base64.b64encode(b"text-not-for-logs").decode() not in record.getMessage()


async def test_a_malformed_line_and_a_line_over_the_limit_are_refused_and_the_watch_resumes_at_the_last_version(
    tmp_path: Path, api: SecretApi, caplog: pytest.LogCaptureFixture
) -> None:
    api.items, api.version = [config("5", b"a")], "5"
    async with following(tmp_path, api) as f:
        await f.next_offer()
        watch = await api.next_watch()
        watch.send(bookmark("6"), b'{"type": "MODIFIED", "object": {"data": {"k": "c2VjcmV0"}}\n')
        watch = await api.next_watch()
        assert watch.query["resourceVersion"] == "6"
        piece = b"x" * 65536
        watch.send(*[piece] * (config_secret.MAX_LINE_BYTES // len(piece) + 1))
        assert (await api.next_watch()).query["resourceVersion"] == "6"

    assert f.attempts == [0, 0]  # each connected watch starts the count again
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "a watch event that is not JSON" in warnings[0]
    assert "c2VjcmV0" not in " ".join(warnings)
    assert f"longer than {config_secret.MAX_LINE_BYTES} bytes" in warnings[1]


async def test_a_stream_cut_in_the_middle_of_an_event_is_retried_from_the_last_version(
    tmp_path: Path, api: SecretApi
) -> None:
    api.items, api.version = [config("5", b"a")], "5"
    async with following(tmp_path, api) as f:
        await f.next_offer()
        watch = await api.next_watch()
        watch.send(bookmark("8"), b'{"type": "MODI')
        watch.end()
        assert (await api.next_watch()).query["resourceVersion"] == "8"
    assert f.attempts == [0]


async def test_a_missing_secret_is_waited_out_then_offered_once_created(
    tmp_path: Path, api: SecretApi, caplog: pytest.LogCaptureFixture
) -> None:
    api.items, api.version = [], "3"
    async with following(tmp_path, api) as f:
        watch = await api.next_watch()
        assert watch.query["resourceVersion"] == "3"
        assert not f.follower.synced.is_set()
        watch.send(event("ADDED", config("4", b"a")))
        assert await f.next_offer() == ("a", "4")
        assert f.follower.synced.is_set()
    assert any("does not exist" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


async def test_a_deleted_secret_offers_nothing_nor_its_recreation_with_the_same_text_but_a_new_text_is_offered(
    tmp_path: Path, api: SecretApi, caplog: pytest.LogCaptureFixture
) -> None:
    api.items, api.version = [config("5", b"a")], "5"
    async with following(tmp_path, api) as f:
        await f.next_offer()
        watch = await api.next_watch()
        watch.send(event("DELETED", config("6", b"a")), event("ADDED", config("7", b"a")))
        watch.send(event("DELETED", config("8", b"a")), event("ADDED", config("9", b"b")))
        assert await f.next_offer() == ("b", "9")
    deleted = [r for r in caplog.records if "it was deleted" in r.getMessage()]
    assert [r.levelno for r in deleted] == [logging.WARNING, logging.WARNING]


async def test_a_missing_or_binary_key_is_logged_once_each_and_waited_out(
    tmp_path: Path, api: SecretApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=config_secret.__name__)
    api.items, api.version = [config("5", b"a")], "5"
    async with following(tmp_path, api) as f:
        await f.next_offer()
        watch = await api.next_watch()
        no_key, binary = secret(NAME, "6", {}), config("7", b"\xff\xfe")
        watch.send(event("MODIFIED", no_key), event("MODIFIED", no_key), event("MODIFIED", binary))
        watch.send(event("MODIFIED", config("8", b"b")))
        assert await f.next_offer() == ("b", "8")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert f"no key '{KEY}'" in warnings[0]
    assert "not UTF-8" in warnings[1]
    assert any("readable again" in r.getMessage() for r in caplog.records)


async def test_the_token_file_is_read_again_for_every_connection(tmp_path: Path, api: SecretApi) -> None:
    api.items, api.version = [config("5", b"a")], "5"
    async with following(tmp_path, api) as f:
        await f.next_offer()
        watch = await api.next_watch()
        f.token_file.write_text("rotated-by-the-kubelet")
        watch.end()
        await api.next_watch()
    assert [r.token for r in api.requests] == [TOKEN, TOKEN, "rotated-by-the-kubelet"]


async def test_an_unreadable_token_file_is_a_failure_retried_like_any_other(tmp_path: Path, api: SecretApi) -> None:
    api.items, api.version = [config("5", b"a")], "5"
    async with following(tmp_path, api) as f:
        await f.next_offer()
        watch = await api.next_watch()
        f.token_file.unlink()
        watch.end()
        async with asyncio.timeout(BOUND_S):
            await f.failed.wait()
        f.token_file.write_text("back")
        assert (await api.next_watch()).query["resourceVersion"] == "5"
    assert f.attempts[0] == 0
    assert api.requests[-1].token == "back"


async def test_cancelling_the_follower_closes_its_watch_connection(tmp_path: Path, api: SecretApi) -> None:
    api.items, api.version = [config("5", b"a")], "5"
    async with following(tmp_path, api) as f:
        await f.next_offer()
        watch = await api.next_watch()
    async with asyncio.timeout(BOUND_S):
        await watch.closed.wait()


async def test_a_refused_connection_is_warned_as_such_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as unused:  # a port nothing listens on once this closes
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    async with following(tmp_path, SecretApi(f"http://127.0.0.1:{port}")) as f, asyncio.timeout(BOUND_S):
        await f.failed.wait()
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "could not connect for a list" in warning
