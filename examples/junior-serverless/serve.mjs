// A stand-in for the serverless platform, for running the two handlers
// locally: it turns each HTTP request into a Web Request, calls the handler
// its path routes to, and writes the Response back. POST /message goes to
// handler.mjs, POST /sandbox-events to webhook.mjs. Listens on
// 127.0.0.1:$PORT (0: any free port) and prints {"listening": <port>}.
import http from 'node:http';
import { Readable } from 'node:stream';

import handler from './handler.mjs';
import webhook from './webhook.mjs';

const routes = { '/message': handler, '/sandbox-events': webhook };

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, `http://${req.headers.host ?? '127.0.0.1'}`);
  const route = routes[url.pathname];
  const controller = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  let response;
  try {
    if (!route) {
      response = Response.json({ error: 'NotFound' }, { status: 404 });
    } else {
      const body = req.method === 'GET' || req.method === 'HEAD' ? undefined : Readable.toWeb(req);
      response = await route(new Request(url, { method: req.method, headers: req.headers, body, duplex: 'half', signal: controller.signal }));
    }
  } catch (err) {
    response = Response.json({ error: 'InternalError', message: err instanceof Error ? err.message : String(err) }, { status: 500 });
  }
  res.writeHead(response.status, Object.fromEntries(response.headers));
  res.end(Buffer.from(await response.arrayBuffer()));
});

server.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => {
  console.log(JSON.stringify({ listening: server.address().port }));
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
