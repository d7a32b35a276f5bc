// An HTTP server on 127.0.0.1:PORT whose state is a timer: every 10 ms a setInterval
// callback adds one to a counter. GET / answers "ticks N"; the program prints "progress N"
// every 100 ticks and checks itself: the counter never goes back (a restore brings back
// the counter of its checkpoint, never an older one) and the timer keeps firing after a
// restore (a stalled timer would stop the progress lines, which the test waits on).
"use strict";
const http = require("http");
const port = Number(process.argv[2]);
let ticks = 0;
let lastSeen = 0;
setInterval(() => {
  ticks += 1;
  if (ticks < lastSeen) console.log(`FAIL ticks went back from ${lastSeen} to ${ticks}`);
  lastSeen = ticks;
  if (ticks % 100 === 0) console.log(`progress ${ticks / 100}`);
}, 10);
http
  .createServer((req, res) => {
    const body = `ticks ${ticks}\n`;
    res.writeHead(200, { "Content-Type": "text/plain", "Content-Length": body.length });
    res.end(body);
  })
  .listen(port, "127.0.0.1", () => console.log(`listening ${port}`));
