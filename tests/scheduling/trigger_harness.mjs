// Evaluates an OpenClaw condition-trigger script the way the gateway's headless runner
// does for the parts the script uses: `exec({command, env})` runs a shell and answers
// {status, exitCode, aggregated}, `json(value)` records the answer, `trigger.state` is the
// previous state. Prints the answer as JSON. Usage: node trigger_harness.mjs SCRIPT [STATE]
import { readFileSync } from "node:fs";
import { spawnSync } from "node:child_process";

const src = readFileSync(process.argv[2], "utf8");
const exec = async ({ command, env }) => {
  const p = spawnSync("sh", ["-c", command], {
    encoding: "utf8",
    env: { ...process.env, ...(env ?? {}) },
  });
  const tail = p.status === 0 ? "" : `\n\n(Command exited with code ${p.status})`;
  return {
    status: "completed",
    exitCode: p.status,
    aggregated: (p.stdout ?? "") + (p.stderr ?? "") + tail,
  };
};
let answer = null;
const json = (value) => {
  answer = value;
};
const state = JSON.parse(process.argv[3] ?? "null");
const AsyncFunction = Object.getPrototypeOf(async function () {}).constructor;
await new AsyncFunction("exec", "json", "trigger", src)(exec, json, { state });
process.stdout.write(JSON.stringify(answer) + "\n");
