// node_server.mjs — the baseline for bench/ws: a minimal Node socket.io server doing what
// jailboxd does for the benchmark's workload: websocket transport only, auth {token}, every
// socket joins one room, and POST /approve/:id broadcasts one jailbox:op event to the room.
// Prints {"port":N} on stdout once listening. Env: TOKEN, OP_TEMPLATE (JSON of an op).
import { createServer } from 'node:http';
import { Server } from 'socket.io';

const token = process.env.TOKEN;
const template = JSON.parse(process.env.OP_TEMPLATE || '{}');
const http = createServer((req, res) => {
  const m = req.method === 'POST' && req.url.match(/^\/approve\/(\d+)$/);
  if (!m) { res.statusCode = 404; res.end(); return; }
  req.resume();
  req.on('end', () => {
    const op = { ...template, opId: Number(m[1]), state: 'approved', decision: 'approved' };
    io.to('bench').emit('jailbox:op', op);
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(op));
  });
});
const io = new Server(http, { transports: ['websocket'], pingInterval: 25000, pingTimeout: 20000,
  maxHttpBufferSize: 1 << 20 });
io.use((socket, next) => (socket.handshake.auth && socket.handshake.auth.token === token
  ? next() : next(new Error('unknown or revoked token'))));
io.on('connection', (s) => s.join('bench'));
http.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: http.address().port })));
