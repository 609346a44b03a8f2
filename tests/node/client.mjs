// A second independent client of the skillbox broker: stock @grpc/grpc-js with the contract
// loaded from proto/ by @grpc/proto-loader, no channel options, as a platform team would write it.
//
// Against --target (`unix:///path` or `host:port`, with --ca for TLS) it sends a valid package
// and expects an acceptance, then reads the accepted tree back with GetTree and checks every
// file's bytes against the sha256 of the inventory; sends a hostile package and expects a
// rejection; releases what it was given; asks ServerInfo and reports its deadlines and stream
// and kept-tree bounds. Prints one JSON object; exits non-zero on any surprise. With
// --expect-refusal it only sends --artifact and reports the error status the call ends with.

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const CHUNK = 64 * 1024;

const { values: args } = parseArgs({
  options: {
    target: { type: "string" },
    ca: { type: "string" },
    artifact: { type: "string" },
    hostile: { type: "string" },
    "proto-root": { type: "string" },
    "expect-denied": { type: "boolean", default: false },
    "expect-refusal": { type: "boolean", default: false },
    tree: { type: "boolean", default: false },
  },
});

const definition = protoLoader.loadSync("skillbox/v1/skillbox.proto", {
  includeDirs: [args["proto-root"]],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const v1 = grpc.loadPackageDefinition(definition).skillbox.v1;
const creds = args.ca
  ? grpc.credentials.createSsl(readFileSync(args.ca))
  : grpc.credentials.createInsecure();
const client = new v1.Skillbox(args.target, creds);

const deadline = () => new Date(Date.now() + 60_000);
const fail = (what) => {
  process.stderr.write(`${what}\n`);
  process.exit(1);
};

function extract(header, data) {
  return new Promise((resolve, reject) => {
    const call = client.Extract({ deadline: deadline() }, (err, resp) =>
      err ? reject(err) : resolve(resp),
    );
    call.write({ header });
    for (let i = 0; i < data.length; i += CHUNK) {
      call.write({ chunk: data.subarray(i, i + CHUNK) });
    }
    call.end();
  });
}

function unary(method, request) {
  return new Promise((resolve, reject) =>
    client[method](request, { deadline: deadline() }, (err, resp) =>
      err ? reject(err) : resolve(resp),
    ),
  );
}

/// Every file of the tree, reassembled from its chunks, hashed as it arrives.
function getTree(stagingId) {
  return new Promise((resolve, reject) => {
    const files = new Map();
    let current = null;
    const call = client.GetTree({ staging_id: stagingId }, { deadline: deadline() });
    call.on("data", (msg) => {
      if (msg.entry) {
        current = { entry: msg.entry, hash: createHash("sha256"), bytes: 0 };
        files.set(msg.entry.path, current);
      } else if (msg.chunk && current) {
        current.hash.update(msg.chunk);
        current.bytes += msg.chunk.length;
      }
    });
    call.on("error", reject);
    call.on("end", () => resolve(files));
  });
}

async function main() {
  const seen = {};
  const data = readFileSync(args.artifact);
  const digest = "sha256:" + createHash("sha256").update(data).digest("hex");
  const header = {
    expected_digest: digest,
    declared_type: "ARTIFACT_TYPE_ARCHIVE",
    file_name: "skill.tar",
    caller_label: "node-grpc-js",
  };
  if (args["expect-refusal"]) {
    try {
      const r = await extract(header, data);
      fail(`served: ${r.verdict}, ${r.entries.length} entries`);
    } catch (e) {
      console.log(JSON.stringify({ refused: { code: grpc.status[e.code], details: e.details } }));
      return;
    }
  }
  if (args["expect-denied"]) {
    try {
      await extract(header, data);
      fail("a refused peer was served");
    } catch (e) {
      console.log(JSON.stringify({ denied: { code: grpc.status[e.code], details: e.details } }));
      return;
    }
  }
  const r = await extract(header, data);
  seen.accepted = {
    verdict: r.verdict,
    digest: r.artifact.digest,
    entries: r.entries.map((e) => e.path),
    staging_id: r.staging_id,
  };
  if (r.verdict !== "VERDICT_ACCEPTED" || !r.staging_id) {
    fail(`unexpected answer for a valid package: ${JSON.stringify(r)}`);
  }
  if (args.tree) {
    const tree = await getTree(r.staging_id);
    let checked = 0;
    for (const e of r.entries) {
      if (e.kind !== "ENTRY_KIND_FILE") continue;
      const got = tree.get(e.path);
      if (!got) fail(`the tree lacks ${e.path}`);
      const sha = "sha256:" + got.hash.digest("hex");
      if (sha !== e.sha256 || String(got.bytes) !== String(e.size)) {
        fail(`${e.path}: ${sha} (${got.bytes} bytes) is not the inventory's ${e.sha256} (${e.size})`);
      }
      checked += 1;
    }
    seen.tree = { entries: tree.size, files_checked: checked };
  }
  await unary("Release", { staging_id: r.staging_id });

  const evil = readFileSync(args.hostile);
  const h = await extract({ declared_type: "ARTIFACT_TYPE_ARCHIVE" }, evil);
  seen.hostile = {
    verdict: h.verdict,
    reason: h.reason?.code,
    code_name: h.reason?.code_name,
    staging_id: h.staging_id,
  };
  if (h.verdict !== "VERDICT_REJECTED" || h.staging_id) {
    fail(`unexpected answer for a hostile package: ${JSON.stringify(h)}`);
  }

  const info = await unary("ServerInfo", {});
  seen.server_info = { version: info.version };
  for (const field of [
    "header_timeout_ms",
    "upload_timeout_ms",
    "max_tree_streams",
    "tree_idle_timeout_ms",
    "max_kept_trees",
    "max_kept_bytes",
    "max_open_tree_streams",
    "max_connections",
    "max_partial_request_bytes",
  ]) {
    // 64-bit fields arrive as strings (`longs: String`), 32-bit ones as numbers.
    seen.server_info[field] = String(info[field]);
  }
  console.log(JSON.stringify(seen));
}

main().then(
  () => client.close(),
  (e) => fail(`${e.code !== undefined ? grpc.status[e.code] : ""} ${e.details ?? e.stack ?? e}`),
);
