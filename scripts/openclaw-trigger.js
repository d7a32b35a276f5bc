// `clawpoint watch` as an OpenClaw condition trigger (docs/scheduling.md).
//
// OpenClaw evaluates this script on the job's schedule (at most every 30 s) without a model
// call. It runs one watch pass and fires only when that pass found something new that needs
// a person or an agent (findings of level "attention" or "error"), with those lines as the
// message; otherwise it answers fire:false, which costs nothing and leaves no run history.
// Whatever watch could settle by itself under a standing approval ("acted") wakes no one.
// A watch that gives no report fires once (then stays quiet until it answers again), so a
// broken check does not look like a quiet one.
//
// Before `openclaw cron add --trigger-script`, set CLAWPOINT to the absolute path of the
// clawpoint command (the gateway's shell does not see your PATH) and CLAWPOINT_HOME to the
// state directory watch should use ("" keeps the gateway user's default), e.g.
//   sed -e "s#@CLAWPOINT@#$(command -v clawpoint)#" -e "s#@CLAWPOINT_HOME@##" \
//     scripts/openclaw-trigger.js > ~/.openclaw/clawpoint-trigger.js
const CLAWPOINT = "@CLAWPOINT@";
const CLAWPOINT_HOME = "@CLAWPOINT_HOME@";
const MAX_MESSAGE = 2000;

const quote = (s) => "'" + String(s).replace(/'/g, "'\\''") + "'";
// Wait for the pass (exec would otherwise hand back a background session after a moment);
// an evaluation has 30 s in all.
const res = await exec({
  command: quote(CLAWPOINT) + " watch --once --json 2>/dev/null",
  env: CLAWPOINT_HOME ? { CLAWPOINT_HOME } : {},
  yieldMs: 25000,
  timeoutSeconds: 25,
});
const out = String(res?.aggregated ?? "");
let report = null;
for (const line of out.split("\n").reverse()) {
  if (!line.startsWith("{")) continue;
  try {
    report = JSON.parse(line);
    break;
  } catch (e) {
    // not the report line; keep looking
  }
}
if (report === null) {
  const wasBroken = trigger.state?.broken === true;
  json({
    fire: !wasBroken,
    message: `clawpoint watch gave no report (exit ${res?.exitCode}): ${out.slice(-500)}`,
    state: { broken: true },
  });
} else {
  const lines = (report.findings ?? [])
    .filter((f) => f.new && (f.level === "attention" || f.level === "error"))
    .map((f) => `${f.level}: ${f.message}`);
  let message = lines.join("\n");
  if (message.length > MAX_MESSAGE) message = message.slice(0, MAX_MESSAGE) + " [truncated]";
  json({ fire: lines.length > 0, message, state: { broken: false } });
}
