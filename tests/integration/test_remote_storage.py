"""Remote storage end to end, against real servers on 127.0.0.1 started by the tests.

moto's S3 server (with s3fs) and an HTTP server with Range support (``tests/storage_servers.py``):
reading records and chunks, globs, the Loader with shuffle and resume, record indexes, random
access, every CLI command on URLs, and the errors: not found, permission, connection, and a
prefix or directory given as a file. Nothing reaches the network beyond 127.0.0.1 (the
``no_network`` guard fails any test that tries).
"""

from __future__ import annotations

import json
import pickle
import time
import urllib.request
import warnings

import numpy as np
import pytest

import jaxrec as jr
from jaxrec.cli import main
from jaxrec.testing import assert_resumes_exactly

pytestmark = pytest.mark.integration
pytest.importorskip("s3fs")
pytest.importorskip("aiohttp")

SPEC = {"id": jr.FixedLenFeature([], np.int64)}


def _shards(tmp_path, counts=(37, 23), compressions=(None, "GZIP")) -> list:
    """Local TFRecord shards ``train-<i>.tfrecord[.gz]`` holding ids ``i * 100 + k``."""
    out = []
    for i, (n, compression) in enumerate(zip(counts, compressions, strict=True)):
        path = tmp_path / f"train-{i}.tfrecord{'.gz' if compression else ''}"
        with jr.TFRecordWriter(path, compression) as w:
            w.write_many([jr.encode_example({"id": i * 100 + k}) for k in range(n)])
        out.append(path)
    return out


def _ids(records) -> list[int]:
    return [jr.Example.FromString(r).features.feature["id"].int64_list.value[0] for r in records]


EXPECTED = list(range(37)) + list(range(100, 123))


@pytest.fixture
def s3_data(s3, tmp_path, monkeypatch):
    """Two shards in a fresh bucket; the endpoint only in ``s3.storage_options``, not in the
    environment, so every test proves that the options reach the filesystem."""
    for path in _shards(tmp_path):
        s3.upload(path)
    s3.put("train-dir/inner.tfrecord", b"")  # a "directory": a prefix with an object under it
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    return s3


@pytest.fixture
def http_data(http_store, tmp_path):
    for path in _shards(tmp_path):
        (http_store.root / path.name).write_bytes(path.read_bytes())
    (http_store.root / "train-dir").mkdir()
    return http_store


# --- reading -------------------------------------------------------------------------------------


def test_records_and_chunks_from_s3(s3_data):
    so = s3_data.storage_options
    files = jr.expand_paths(s3_data.url("train-*"), storage_options=so)
    # the prefix "train-dir/" matches the pattern but is not a file
    assert files == [s3_data.url("train-0.tfrecord"), s3_data.url("train-1.tfrecord.gz")]
    assert _ids(jr.read_records(files, storage_options=so)) == EXPECTED
    chunks = list(jr.read_chunks(s3_data.url("train-*"), storage_options=so, max_records=10))
    assert [len(c) for c in chunks] == [10, 10, 10, 7, 10, 10, 3]
    assert chunks[0].path == s3_data.url("train-0.tfrecord")


def test_storage_options_reach_the_filesystem(s3_data):
    """Without the endpoint in the options s3fs would go to AWS (blocked here: no network)."""
    bad = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}
    with pytest.raises(ConnectionError, match="127.0.0.1:9"):
        jr.expand_paths(s3_data.url("train-*"), storage_options=bad)


def test_http_glob_keeps_one_protocol_and_the_loader_reads_it(http_data):
    files = jr.expand_paths(f"{http_data.url}/train-*")
    assert files == [f"{http_data.url}/train-0.tfrecord", f"{http_data.url}/train-1.tfrecord.gz"]
    loader = jr.Loader(f"{http_data.url}/train-*", SPEC, 8)
    got = sorted(i for b in loader for i in np.asarray(b["id"])[b["mask"]].tolist())
    assert got == EXPECTED


def test_loader_over_s3_with_shuffle_and_resume(s3_data):
    so = s3_data.storage_options

    def make(state=None):
        return jr.Loader(
            s3_data.url("train-*"),
            SPEC,
            8,
            shuffle=True,
            seed=3,
            shuffle_buffer=16,
            num_epochs=2,
            state=state,
            storage_options=so,
        )

    loader = make()
    got = [i for b in loader for i in np.asarray(b["id"])[b["mask"]].tolist()]
    assert sorted(got) == sorted(EXPECTED * 2) and got[:60] != got[60:]
    assert_resumes_exactly(make, [1, 5, 9], 2 * loader.batches_per_epoch)


def test_loader_over_s3_training_forever(s3_data):
    """num_epochs=None deals spans by bytes: sizes come from fsspec, with the options."""
    loader = jr.Loader(
        s3_data.url("train-0.tfrecord"),
        SPEC,
        8,
        num_epochs=None,
        storage_options=s3_data.storage_options,
    )
    it = iter(loader)
    try:
        ids = [i for _ in range(10) for i in np.asarray(next(it)["id"]).tolist()]
    finally:
        # Closed here, not left to the garbage collector: collected on fsspec's I/O thread, an
        # unfinished Loader iterator blocks that thread for 30 s while it waits for its own
        # threads, which wait on that thread for their reads.
        it.close()
    assert set(ids) == set(range(37))


# --- indexes and random access -----------------------------------------------------------------


def test_index_build_save_load_on_s3(s3_data, tmp_path):
    so = s3_data.storage_options
    url = s3_data.url("train-0.tfrecord")
    index = jr.TFRecordIndex.build(url, storage_options=so)
    assert len(index) == 37 and index.save() == url + ".idx"
    loaded = jr.TFRecordIndex.load(url, storage_options=so)
    assert np.array_equal(loaded.offsets, index.offsets)
    # into a remote index folder, and a local one
    remote_dir = s3_data.url("indexes")
    assert index.save(index_dir=remote_dir) == f"{remote_dir}/train-0.tfrecord.idx"
    assert len(jr.TFRecordIndex.load(url, index_dir=remote_dir, storage_options=so)) == 37
    index.save(index_dir=str(tmp_path / "idx"))
    assert (
        len(jr.TFRecordIndex.load(url, index_dir=str(tmp_path / "idx"), storage_options=so)) == 37
    )
    # a rewritten file makes the index stale
    s3_data.put("train-0.tfrecord", jr.encode_example({"id": 1}) * 3)
    with pytest.raises(jr.StaleIndexError):
        jr.TFRecordIndex.load(url, storage_options=so)
    with pytest.raises(FileNotFoundError, match="train-9"):
        jr.TFRecordIndex.load(s3_data.url("train-9.tfrecord"), storage_options=so)


def test_random_access_and_grain_source_on_s3(s3, tmp_path, monkeypatch):
    for path in _shards(tmp_path, compressions=(None, None)):
        s3.upload(path)
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    so = s3.storage_options
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "built record indexes"
        reader = jr.RandomAccessReader(s3.url("train-*"), storage_options=so, save_index=True)
    assert len(reader) == 60 and _ids([reader[40], reader[3]]) == [103, 3]
    grain = pytest.importorskip("jaxrec.grain")
    source = grain.TFRecordDataSource(s3.url("train-*"), SPEC, storage_options=so)  # saved indexes
    assert int(source[37]["id"]) == 100
    # grain's worker processes get the source pickled: the options travel with it
    assert int(pickle.loads(pickle.dumps(source))[38]["id"]) == 101


def test_the_loader_counts_from_indexes_on_s3(s3_data, monkeypatch):
    so = s3_data.storage_options
    for name in ("train-0.tfrecord", "train-1.tfrecord.gz"):
        jr.TFRecordIndex.build(s3_data.url(name), storage_options=so).save()
    import jaxrec._loader.counts as counts

    def no_framing(*args, **kwargs):
        raise AssertionError("counted by framing although the indexes are there")

    monkeypatch.setattr(counts, "_count_range", no_framing)
    loader = jr.Loader(s3_data.url("train-*"), SPEC, 8, storage_options=so)
    assert loader.record_counts == [37, 23]


# --- errors ------------------------------------------------------------------------------------


def test_a_prefix_or_a_bucket_is_not_a_file(s3_data):
    so = s3_data.storage_options
    for url in (s3_data.url("train-dir"), s3_data.url("train-dir/"), f"s3://{s3_data.name}"):
        with pytest.raises(IsADirectoryError, match="not a file") as info:
            list(jr.read_records(url, storage_options=so))
        assert url in str(info.value)
    with pytest.raises(IsADirectoryError, match="train-dir"):
        jr.Loader(s3_data.url("train-dir"), SPEC, 8, storage_options=so)


def test_missing_object_and_missing_bucket(s3_data):
    so = s3_data.storage_options
    missing = s3_data.url("nope.tfrecord")
    with pytest.raises(FileNotFoundError, match=f"{missing}: no such"):
        list(jr.read_records(missing, storage_options=so))
    with pytest.raises(FileNotFoundError, match="no such bucket 'no-such-bucket'"):
        list(jr.read_records("s3://no-such-bucket/train.tfrecord", storage_options=so))
    with pytest.raises(FileNotFoundError, match="no-such-bucket"):
        jr.expand_paths("s3://no-such-bucket/train-*", storage_options=so)
    with pytest.raises(FileNotFoundError, match="no file matches"):
        jr.expand_paths(s3_data.url("nothing-*"), storage_options=so)


@pytest.fixture
def s3_reader_without_get(s3_data):
    """Credentials of a user allowed to list the bucket but not to read objects, with moto's
    access checks on (they are off by default); off again afterwards."""
    import boto3

    iam = boto3.client("iam", endpoint_url=s3_data.endpoint)
    user = f"reader-{s3_data.name}"
    iam.create_user(UserName=user)
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": "*"}],
    }
    arn = iam.create_policy(PolicyName=user, PolicyDocument=json.dumps(policy))["Policy"]["Arn"]
    iam.attach_user_policy(UserName=user, PolicyArn=arn)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    _moto_auth(s3_data.endpoint, b"0")
    try:
        yield {
            "key": key["AccessKeyId"],
            "secret": key["SecretAccessKey"],
            "token": None,
            **s3_data.storage_options,
        }
    finally:
        _moto_auth(s3_data.endpoint, b"inf")


def test_access_denied_is_a_permission_error(s3_data, s3_reader_without_get):
    url = s3_data.url("train-0.tfrecord")
    with pytest.raises(PermissionError, match=f"{url}: permission denied") as info:
        list(jr.read_records(url, storage_options=s3_reader_without_get))
    assert not isinstance(info.value, FileNotFoundError)
    with pytest.raises(PermissionError):
        jr.Loader(s3_data.url("train-*"), SPEC, 8, storage_options=s3_reader_without_get)


def test_unknown_credentials_are_a_permission_error(s3_data):
    s3_data.fs.invalidate_cache()
    _moto_auth(s3_data.endpoint, b"0")
    try:
        bad = {"key": "AKIAUNKNOWN", "secret": "x", "token": None, **s3_data.storage_options}
        with pytest.raises(PermissionError, match="train-0"):
            list(jr.read_records(s3_data.url("train-0.tfrecord"), storage_options=bad))
    finally:
        _moto_auth(s3_data.endpoint, b"inf")


def test_a_refused_connection_is_a_connection_error_and_fails_fast(s3_data):
    url = s3_data.url("train-0.tfrecord")
    start = time.monotonic()
    with pytest.raises(ConnectionError) as info:
        list(
            jr.read_records(
                url, storage_options={"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}
            )
        )
    assert time.monotonic() - start < 5  # botocore's own defaults retried for ~7 s
    message = str(info.value)
    assert message.startswith(url) and "127.0.0.1:9" in message
    assert not isinstance(info.value, FileNotFoundError)


def test_with_nothing_configured_an_unreachable_cloud_fails_fast_and_says_what_was_tried(
    s3, monkeypatch, no_network
):
    """No endpoint anywhere: s3fs goes to AWS; with no network that must fail in seconds at
    most, as a ConnectionError naming what it tried (here the test guard blocks the lookups)."""
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    url = "s3://some-bucket/train.tfrecord"
    start = time.monotonic()
    with pytest.raises(ConnectionError) as info:
        list(jr.read_records(url))
    assert time.monotonic() - start < 5
    assert str(info.value).startswith(url) and "amazonaws.com" in str(info.value)
    assert no_network and all(kind == "resolve" for kind, _ in no_network)
    no_network.clear()  # blocked, as expected


def test_http_errors_tell_not_found_permission_and_connection_apart(http_data):
    base = http_data.url
    with pytest.raises(FileNotFoundError, match=f"{base}/nope.tfrecord: no such file"):
        list(jr.read_records(f"{base}/nope.tfrecord"))
    http_data.fault("/train-0", "403")
    with pytest.raises(PermissionError, match="403") as info:
        list(jr.read_records(f"{base}/train-0.tfrecord"))
    assert str(info.value).startswith(f"{base}/train-0.tfrecord")
    with pytest.raises(PermissionError, match="403"):
        jr.Loader(f"{base}/train-*", SPEC, 8)
    with pytest.raises(ConnectionError, match="127.0.0.1:9"):
        list(jr.read_records("http://127.0.0.1:9/train-0.tfrecord"))
    with pytest.raises(IsADirectoryError, match="train-dir"):  # redirected to train-dir/
        list(jr.read_records(f"{base}/train-dir"))


def test_an_unknown_host_is_a_connection_error(http_data, no_network):
    with pytest.raises(ConnectionError, match="storage.invalid") as info:
        list(jr.read_records("http://storage.invalid/train-0.tfrecord"))
    assert not isinstance(info.value, FileNotFoundError)
    assert set(no_network) == {("resolve", "storage.invalid")}  # fsspec tries HEAD, then GET
    no_network.clear()


def test_a_silent_server_times_out_as_a_connection_error(http_data):
    import aiohttp

    http_data.fault("/train-0", "hang")
    so = {"client_kwargs": {"timeout": aiohttp.ClientTimeout(sock_read=0.3)}}
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="train-0"):
        list(jr.read_records(f"{http_data.url}/train-0.tfrecord", storage_options=so))
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("name", ["train-0.tfrecord", "train-1.tfrecord.gz"])
def test_a_connection_lost_mid_file_is_never_a_bad_record(http_data, name):
    """Inside a GZIP stream the native reader sees a failed read as the end of the stream; the
    error must still be the connection's, with on_error="skip" too."""
    rng = np.random.default_rng(0)
    with jr.TFRecordWriter(http_data.root / name, "GZIP" if name.endswith(".gz") else None) as w:
        w.write_many([rng.bytes(1000) for _ in range(300)])  # 300 KB that do not compress
    url = f"{http_data.url}/{name}"
    http_data.fault(f"/{name}", "close", from_byte=1)  # opens (sniffs), then fails part-way
    reader = jr._io.records.open_reader(url, skip_errors=True)
    records = 0
    with pytest.raises(ConnectionError, match=name):
        while (chunk := reader.read_chunk(1 << 62, 1 << 16)) is not None:
            records += len(chunk)
    assert records < 300


# --- the command line ---------------------------------------------------------------------------


def _moto_auth(endpoint: str, value: bytes) -> None:
    """Turns moto's access checks on (b"0": from the next request) or off (b"inf")."""
    request = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=value,
        headers={"Content-Type": "text/plain"},  # not a form: moto reads the raw body
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_cli_command_reads_s3(s3_data, capsys, tmp_path):
    so = json.dumps(s3_data.storage_options)
    pattern = s3_data.url("train-*")
    code, out, _ = _cli(capsys, "inspect", pattern, "--storage-options", so, "--json")
    assert code == 0 and json.loads(out)["features"]["id"]["type"] == "int64_list"
    code, out, _ = _cli(capsys, "head", pattern, "-n", "2", "--json", "--storage-options", so)
    assert (
        code == 0
        and [json.loads(line)["file"] for line in out.splitlines()]
        == [s3_data.url("train-0.tfrecord")] * 2
    )
    code, out, _ = _cli(capsys, "count", pattern, "--json", "--storage-options", so)
    result = json.loads(out)
    assert code == 0 and result["total"] == 60
    assert [f["bytes"] for f in result["files"]] == [
        s3_data.fs.size(f"{s3_data.name}/{n}") for n in ("train-0.tfrecord", "train-1.tfrecord.gz")
    ]
    code, out, _ = _cli(capsys, "verify", pattern, "--json", "--storage-options", so)
    assert code == 0 and json.loads(out)["records"] == 60
    # index: beside the files, then into a remote and a local folder
    code, out, _ = _cli(capsys, "index", pattern, "--json", "--storage-options", so)
    assert code == 0 and [f["index"] for f in json.loads(out)["files"]] == [
        s3_data.url("train-0.tfrecord.idx"),
        s3_data.url("train-1.tfrecord.gz.idx"),
    ]
    code, out, _ = _cli(capsys, "count", pattern, "--json", "--storage-options", so)
    assert [f["source"] for f in json.loads(out)["files"]] == ["index", "index"]
    remote_dir = s3_data.url("indexes")
    code, out, _ = _cli(
        capsys, "index", pattern, "--index-dir", remote_dir, "--json", "--storage-options", so
    )
    assert (
        code == 0 and json.loads(out)["files"][0]["index"] == f"{remote_dir}/train-0.tfrecord.idx"
    )
    local_dir = tmp_path / "idx"
    code, out, _ = _cli(
        capsys, "index", pattern, "--index-dir", str(local_dir), "--storage-options", so
    )
    assert code == 0 and sorted(p.name for p in local_dir.iterdir()) == [
        "train-0.tfrecord.idx",
        "train-1.tfrecord.gz.idx",
    ]
    code, out, _ = _cli(
        capsys, "convert", pattern, "-o", str(tmp_path / "out"), "--json", "--storage-options", so
    )
    assert code == 0 and _ids(jr.read_records(str(tmp_path / "out" / "*.tfrecord"))) == EXPECTED
    code, out, _ = _cli(
        capsys, "bench", pattern, "--json", "--threads", "2", "--storage-options", so
    )
    assert code == 0 and json.loads(out)["records"] == 60


def test_cli_errors_on_urls(s3_data, capsys):
    so = json.dumps(s3_data.storage_options)
    code, _, err = _cli(capsys, "count", s3_data.url("train-dir"), "--storage-options", so)
    assert code == 2 and "folder or prefix" in err and s3_data.url("train-dir") in err
    code, _, err = _cli(capsys, "verify", s3_data.url("nope.tfrecord"), "--storage-options", so)
    assert code == 2 and "nope.tfrecord: no such" in err
    refused = json.dumps({"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}})
    code, _, err = _cli(
        capsys, "head", s3_data.url("train-0.tfrecord"), "--storage-options", refused
    )
    assert code == 2 and "127.0.0.1:9" in err
    with pytest.raises(SystemExit):
        main(["count", s3_data.url("train-*"), "--storage-options", "[1, 2]"])
    assert "expected a JSON object" in capsys.readouterr().err


def test_cli_reads_http(http_data, capsys):
    code, out, _ = _cli(capsys, "count", f"{http_data.url}/train-*", "--json")
    assert code == 0 and json.loads(out)["total"] == 60
    code, _, err = _cli(capsys, "count", f"{http_data.url}/train-dir/")
    assert code == 2 and "folder or prefix" in err
