#!/usr/bin/env python3
"""An independent client of the skillbox broker: Python grpcio with stubs generated from proto/.

Proves the contract outside Rust. Generates the stubs with grpc_tools.protoc into a temporary
directory, then over a stock channel with no options (the broker's Unix socket, or TCP+TLS):
  - sends a valid package (header with its digest, then chunks) and expects an acceptance,
    then releases the staged tree;
  - sends a package with a `../` entry and expects a rejection with REASON_CODE_PATH_TRAVERSAL;
  - sends a malformed digest and expects INVALID_ARGUMENT;
  - asks ServerInfo and reports its version, a limit, and its deadlines and stream and
    kept-tree bounds.
With --expect-refusal it only sends the artifact (header and chunks, as above) and reports the
error status the call ends with (an answer is a surprise).
With --bad-frame instead: sends, through grpcio's generic stream_unary with identity
serializers (raw message bytes, each framed by grpcio), an Extract whose first message is bytes
that are no ExtractRequest, and one whose header and first chunk are good and whose next message
is such bytes; reports each status with its grpc-status-details-bin in hex.
With --bad-unary instead: sends, through grpcio's generic unary_unary and unary_stream with
identity serializers, bytes that are no request message to Release, GetTree and ServerInfo, then
a ReleaseRequest that decodes but whose staging_id is no staging id, and an empty
ServerInfoRequest (no bytes) the same way; reports each status as --bad-frame does, and the
empty request's answer size.
With --gzip instead: sends ServerInfo and the valid package compressed
(`compression=grpc.Compression.Gzip`, per call and per channel) and reports each status, then
the same package uncompressed on the same channel (docs/broker.md: compressed requests are
UNIMPLEMENTED).
Prints one JSON object with what it saw; exits non-zero on any surprise.
"""

import argparse
import hashlib
import importlib
import io
import json
import sys
import tarfile
import tempfile

try:
    import grpc
    from grpc_tools import protoc
except ImportError as e:  # fail loudly: the Rust test reports this output
    sys.stderr.write(f"missing Python dependency ({e}); pip install -r tests/python/requirements.txt\n")
    sys.exit(3)

CHUNK = 64 * 1024
SKILL = b"---\nname: py-demo\ndescription: A skill sent by the Python client\n---\nHello.\n"


def tar_of(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def stubs(proto_root, out_dir):
    rc = protoc.main([
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        "skillbox/v1/skillbox.proto",
    ])
    if rc != 0:
        raise SystemExit(f"protoc failed with {rc}")
    sys.path.insert(0, out_dir)
    return (importlib.import_module("skillbox.v1.skillbox_pb2"),
            importlib.import_module("skillbox.v1.skillbox_pb2_grpc"))


def requests(pb, header, data):
    yield pb.ExtractRequest(header=header)
    for i in range(0, len(data), CHUNK):
        yield pb.ExtractRequest(chunk=data[i:i + CHUNK])


def gzip_calls(pb, rpc, socket, header, data):
    """ServerInfo and Extract sent gzip-compressed, per call and per channel, each status (or
    answer) reported; then the package uncompressed on the per-call channel."""
    seen = {}

    def status(call):
        try:
            r = call()
            return {"code": "OK", "verdict": pb.Verdict.Name(r.verdict) if hasattr(r, "verdict") else None}
        except grpc.RpcError as e:
            return {"code": e.code().name, "details": e.details()}

    per_call = grpc.insecure_channel(f"unix://{socket}")
    per_channel = grpc.insecure_channel(f"unix://{socket}", compression=grpc.Compression.Gzip)
    for label, channel, kw in (("per_call", per_call, {"compression": grpc.Compression.Gzip}),
                               ("per_channel", per_channel, {})):
        client = rpc.SkillboxStub(channel)
        seen[label] = {
            "server_info": status(lambda: client.ServerInfo(pb.ServerInfoRequest(), timeout=10, **kw)),
            "extract": status(lambda: client.Extract(requests(pb, header, data), timeout=60, **kw)),
        }
    client = rpc.SkillboxStub(per_call)
    r = client.Extract(requests(pb, header, data), timeout=60)
    seen["uncompressed"] = {"verdict": pb.Verdict.Name(r.verdict)}
    if r.staging_id:
        client.Release(pb.ReleaseRequest(staging_id=r.staging_id), timeout=10)
    return seen


# Not a protobuf message: a varint tag whose continuation bits never end.
NOT_PROTOBUF = b"\xff\xff\xff\xff"


def bad_frames(pb, channel, header, data):
    """Each case's status: code, details and the google.rpc.Status detail bytes (hex)."""
    extract = channel.stream_unary("/skillbox.v1.Skillbox/Extract",
                                   request_serializer=None, response_deserializer=None)
    good = [pb.ExtractRequest(header=header).SerializeToString(),
            pb.ExtractRequest(chunk=data[:CHUNK]).SerializeToString()]
    seen = {}
    for name, frames in (("first", [NOT_PROTOBUF]), ("after_a_chunk", good + [NOT_PROTOBUF])):
        try:
            extract(iter(frames), timeout=60)
            raise SystemExit(f"{name}: answered")
        except grpc.RpcError as e:
            detail = dict(e.trailing_metadata() or ()).get("grpc-status-details-bin", b"")
            seen[name] = {"code": e.code().name, "details": e.details(),
                          "status_details_hex": detail.hex()}
    return seen


def bad_unary(channel):
    """Each unary call's status for bytes that are no request message, as bad_frames reports."""
    seen = {}
    for method, streamed in (("Release", False), ("GetTree", True), ("ServerInfo", False)):
        path = f"/skillbox.v1.Skillbox/{method}"
        try:
            if streamed:
                call = channel.unary_stream(path, request_serializer=None, response_deserializer=None)
                list(call(NOT_PROTOBUF, timeout=60))
            else:
                call = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
                call(NOT_PROTOBUF, timeout=60)
            raise SystemExit(f"{method}: answered")
        except grpc.RpcError as e:
            detail = dict(e.trailing_metadata() or ()).get("grpc-status-details-bin", b"")
            seen[method] = {"code": e.code().name, "details": e.details(),
                            "status_details_hex": detail.hex()}
    # A ReleaseRequest that decodes (field 1, staging_id, "nope") and that Release refuses.
    release = channel.unary_unary("/skillbox.v1.Skillbox/Release",
                                  request_serializer=None, response_deserializer=None)
    try:
        release(b"\x0a\x04nope", timeout=60)
        raise SystemExit("Release_bad_id: answered")
    except grpc.RpcError as e:
        seen["Release_bad_id"] = {"code": e.code().name, "details": e.details()}
    # The same generic call with a request that decodes (an empty ServerInfoRequest) is served.
    info = channel.unary_unary("/skillbox.v1.Skillbox/ServerInfo",
                               request_serializer=None, response_deserializer=None)
    seen["ServerInfo_empty"] = {"answer_bytes": len(info(b"", timeout=60))}
    return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", help="the broker's Unix socket")
    ap.add_argument("--target", help="host:port of a TLS broker (instead of --socket)")
    ap.add_argument("--ca", help="PEM CA bundle that signed the server's certificate (with --target)")
    ap.add_argument("--artifact", required=True, help="a valid skill package (tar)")
    ap.add_argument("--proto-root", required=True)
    ap.add_argument("--tree", action="store_true", help="read the accepted tree back (GetTree) and check every hash")
    ap.add_argument("--expect-denied", action="store_true", help="expect PERMISSION_DENIED (a refused peer uid)")
    ap.add_argument("--expect-refusal", action="store_true",
                    help="expect the Extract of --artifact to end with an error status, and report it")
    ap.add_argument("--bad-frame", action="store_true",
                    help="send messages that are no ExtractRequest (over --socket) and report each status")
    ap.add_argument("--bad-unary", action="store_true",
                    help="send bytes that are no request message to each unary call (over --socket) and report each status")
    ap.add_argument("--gzip", action="store_true", help="send gzip-compressed requests (over --socket) and report each status")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as out_dir:
        pb, rpc = stubs(args.proto_root, out_dir)
        # Stock channels, no options: what a user writes.
        if args.target:
            ca = open(args.ca, "rb").read() if args.ca else None
            channel = grpc.secure_channel(args.target, grpc.ssl_channel_credentials(root_certificates=ca))
        else:
            channel = grpc.insecure_channel(f"unix://{args.socket}")
        client = rpc.SkillboxStub(channel)
        seen = {}

        data = open(args.artifact, "rb").read()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        header = pb.ExtractHeader(expected_digest=digest, declared_type=pb.ARTIFACT_TYPE_ARCHIVE,
                                  file_name="skill.tar", caller_label="python-grpcio")
        if args.expect_refusal:
            try:
                r = client.Extract(requests(pb, header, data), timeout=60)
                raise SystemExit(f"served: {pb.Verdict.Name(r.verdict)}, {len(r.entries)} entries")
            except grpc.RpcError as e:
                print(json.dumps({"refused": {"code": e.code().name, "details": e.details()}}))
                return
        if args.gzip:
            print(json.dumps(gzip_calls(pb, rpc, args.socket, header, data)))
            return
        if args.bad_frame:
            print(json.dumps(bad_frames(pb, channel, header, data)))
            return
        if args.bad_unary:
            print(json.dumps(bad_unary(channel)))
            return
        if args.expect_denied:
            try:
                client.Extract(requests(pb, header, data), timeout=60)
                raise SystemExit("a refused peer was served")
            except grpc.RpcError as e:
                print(json.dumps({"denied": {"code": e.code().name, "details": e.details()}}))
                return
        r = client.Extract(requests(pb, header, data), timeout=60)
        seen["accepted"] = {
            "verdict": pb.Verdict.Name(r.verdict),
            "digest": r.artifact.digest,
            "entries": [e.path for e in r.entries],
            "staging_id": r.staging_id,
        }
        if r.verdict != pb.VERDICT_ACCEPTED or not r.staging_id or "SKILL.md" not in seen["accepted"]["entries"]:
            raise SystemExit(f"unexpected answer for a valid package: {r}")
        if args.tree:
            got, current = {}, None
            for part in client.GetTree(pb.GetTreeRequest(staging_id=r.staging_id), timeout=60):
                if part.HasField("entry"):
                    current = got.setdefault(part.entry.path, hashlib.sha256())
                elif part.HasField("chunk"):
                    current.update(part.chunk)
            checked = 0
            for e in r.entries:
                if e.kind != pb.ENTRY_KIND_FILE:
                    continue
                if e.path not in got or "sha256:" + got[e.path].hexdigest() != e.sha256:
                    raise SystemExit(f"{e.path}: the tree does not match the inventory")
                checked += 1
            seen["tree"] = {"entries": len(got), "files_checked": checked}
        client.Release(pb.ReleaseRequest(staging_id=r.staging_id), timeout=10)

        evil = tar_of([("SKILL.md", SKILL), ("../evil.sh", b"#!/bin/sh\n")])
        r = client.Extract(requests(pb, pb.ExtractHeader(declared_type=pb.ARTIFACT_TYPE_ARCHIVE), evil), timeout=60)
        seen["hostile"] = {
            "verdict": pb.Verdict.Name(r.verdict),
            "reason": pb.ReasonCode.Name(r.reason.code),
            "code_name": r.reason.code_name,
            "entry": r.reason.entry,
        }
        if r.verdict != pb.VERDICT_REJECTED or r.staging_id:
            raise SystemExit(f"unexpected answer for a hostile package: {r}")

        bad = pb.ExtractHeader(expected_digest="sha256:XYZ", declared_type=pb.ARTIFACT_TYPE_ARCHIVE)
        try:
            client.Extract(requests(pb, bad, data), timeout=60)
            raise SystemExit("a malformed digest was accepted")
        except grpc.RpcError as e:
            seen["bad_digest"] = {"code": e.code().name, "details": e.details()}

        info = client.ServerInfo(pb.ServerInfoRequest(), timeout=10)
        seen["server_info"] = {"version": info.version, "max_entries": info.limits.max_entries}
        for field in ("header_timeout_ms", "upload_timeout_ms", "max_tree_streams",
                      "tree_idle_timeout_ms", "max_kept_trees", "max_kept_bytes",
                      "max_open_tree_streams", "max_connections", "max_partial_request_bytes"):
            seen["server_info"][field] = getattr(info, field)
        print(json.dumps(seen))


if __name__ == "__main__":
    main()
