// The page's room: a cluster's wall as one more node of it, with one member
// (the visitor), speaking the wire as docs/wire.md says. It registers at
// the rendezvous under the cluster's topic, exchanges rosters with every
// node serving the cluster (dialling each: nobody can dial a page), and
// from then on publishes its member's join, messages, a beat every 5 s and
// its goodbye; it follows the other nodes' rosters from their deltas and
// beats, sends each message's origin a receipt (so that acks count the
// page), and counts the receipts of its own messages. Nobody can dial a
// page, so two pages cannot exchange rosters: a page's beats carry its
// member, from which the other pages follow it; and a page's ack counts
// the nodes' sockets, not the other pages'. The node it came
// from serves the cluster for it while it is connected (wire.md, Browser
// peers), so that two pages on two nodes reach each other through them.
//
// Simpler than a node's, on purpose: messages show in the order they come
// (a node puts each origin's back in order), and a node's members go at
// its goodbye or leave without waiting for its last messages.

import { dial, peerOf, request, serve, transportOf, WEBRTC } from './net.js'
import * as wire from './wire.js'

const maxStrangers = 64 // views of peers heard on the topic but not known
const maxBeatMembers = 16 // members a beat may carry (a page's: one)
const sendRate = 200 // messages a second a page sends, in bursts of twice that (a socket's default pace)
const maxRosterFrame = 20488192 // a roster request or answer (wire.md 7.2)
const maxReceiptFrame = 80 << 10
const maxRendezvousFrame = 1 << 20
const lookupPause = 1000 // ms between the lookups made for strangers
const renewEvery = 30000 // ms between rendezvous renewals
const retryMin = 1000 // ms before redialling a node that went away, doubling
const retryMax = 30000

const now = () => Date.now()

function newView () {
  return { known: false, members: new Map(), epoch: 0, rev: 0, pending: new Map(), mark: 0, seen: now(), fetching: false }
}

export class Room {
  // opts: node (libp2p), cluster, key (the wire key of a private cluster,
  // else null), transport (the preferred one), home (the addresses of the
  // node the page came from), rendezvous (those of the rendezvous nodes,
  // the home node's included when it is one), refresh (async: fresh
  // {home, rendezvous} from the home node), on (callbacks: message,
  // members, status).
  constructor (opts) {
    Object.assign(this, opts)
    this.topic = wire.topicOf(this.cluster, this.key !== null)
    this.self = this.node.peerId.toString()
    this.pubsub = this.node.services.pubsub
    this.views = new Map() // peer id -> view of its roster
    this.acks = new Map() // message id -> its receipts under way
    this.found = new Map() // peer id -> addresses, from the rendezvous
    this.looked = 0 // when the last lookup for strangers began
    this.redial = new Map() // peer id -> ms before the next redial
    this.epoch = 0
    this.rev = 0
    this.seq = 0
    this.n = 0
    this.me = null
    this.timers = []
    this.closed = false
  }

  // start joins the cluster as member me.
  async start (me) {
    this.me = me
    this.epoch = now() * 1000
    this.rev = 1
    await serve(this.node, wire.rosterProto, maxRosterFrame, (p, req) => this.serveRoster(p, req))
    await serve(this.node, wire.receiptProto, maxReceiptFrame, (p, req) => this.serveReceipts(p, req))
    this.pubsub.topicValidators.set(this.topic, (_, m) => this.validate(m) ? 'accept' : 'reject')
    this.pubsub.addEventListener('message', (ev) => this.onMessage(ev.detail))
    this.node.addEventListener('peer:disconnect', (ev) => this.onDisconnect(ev.detail.toString()))
    this.pubsub.subscribe(this.topic)
    await this.connectAll()
    const serving = await this.lookup(true)
    await Promise.all([peerOf(this.home[0]), ...serving].map((p) => this.exchange(p)))
    await this.publishFirst({ t: 'join', member: me, epoch: this.epoch, rev: this.rev })
    await this.beat() // other pages learn this one from its beats
    this.every(wire.beatInterval, () => this.beat())
    this.every(renewEvery, () => this.renew())
    this.emitMembers()
  }

  every (ms, fn) {
    this.timers.push(setInterval(() => fn().catch(() => {}), ms))
  }

  // connectAll dials the home node and the rendezvous nodes, by the
  // preferred transport.
  async connectAll () {
    await this.dialPeer(this.home)
    await Promise.all(this.rendezvous.map((a) => this.dialPeer([a]).catch(() => {})))
  }

  // dialPeer dials the peer of addrs by the preferred transport, else by
  // another one it has.
  async dialPeer (addrs, transport = this.transport) {
    const usable = addrs.filter((a) => transportOf(a) !== '')
    const ordered = [...usable.filter((a) => transportOf(a) === transport), ...usable.filter((a) => transportOf(a) !== transport)]
    return dial(this.node, ordered)
  }

  // lookup registers at (register) or looks up every rendezvous node
  // connected, notes the peers found and returns them.
  async lookup (register) {
    const req = wire.utf8(JSON.stringify({ ns: this.topic, register }))
    this.looked = now()
    const found = new Map()
    await Promise.all(this.rendezvous.map(async (a) => {
      try {
        const resp = JSON.parse(wire.fromUTF8(await request(this.node, peerOf(a), wire.rendezvousProto, req, maxRendezvousFrame)))
        for (const p of resp.peers ?? []) found.set(String(p.id), (p.addrs ?? []).map(String))
      } catch {}
    }))
    found.delete(this.self)
    for (const [p, addrs] of found) this.found.set(p, addrs.map((a) => a.includes('/p2p/') ? a : `${a}/p2p/${p}`))
    return [...found.keys()]
  }

  // renew renews the registration and exchanges rosters with the nodes
  // that came meanwhile.
  async renew () {
    for (const p of await this.lookup(true)) {
      if (!this.views.get(p)?.known) this.exchange(p)
    }
  }

  // exchange swaps rosters with node p (wire.md 8.1), dialling it first
  // (by WebRTC-direct unless it is named in the page, whose policy lets
  // it dial only those by WebTransport): p then knows this page, and this
  // page p.
  async exchange (p) {
    const v = this.viewOf(p, true)
    if (v.fetching) return
    v.fetching = true
    try {
      if (!this.connected(p)) {
        const named = [...this.home, ...this.rendezvous].filter((a) => peerOf(a) === p)
        await this.dialPeer(named.length > 0 ? named : this.found.get(p) ?? [], named.length > 0 ? this.transport : WEBRTC)
      }
      const challenge = this.key ? wire.b64url(crypto.getRandomValues(new Uint8Array(16))) : undefined
      const body = wire.b64(wire.encode(this.key, this.cluster, wire.rosterReqAD(this.self, p, challenge), this.roster()))
      const req = wire.utf8(JSON.stringify({ cluster: this.cluster, body, challenge }))
      const raw = await request(this.node, p, wire.rosterProto, req, maxRosterFrame)
      if (raw.length === 0) return // it does not serve the cluster
      const ro = wire.decode(this.key, this.cluster, wire.rosterRespAD(p, this.self, challenge), raw)
      wire.checkRoster(ro, this.cluster)
      this.setRoster(p, ro)
    } catch {
      // unreachable, or it refused: its beats bring it back
    } finally {
      v.fetching = false
    }
  }

  connected (p) {
    return this.node.getConnections().some((c) => c.remotePeer.toString() === p && c.status === 'open')
  }

  roster () {
    return { epoch: this.epoch, rev: this.rev, seq: this.seq, members: this.me ? [this.me] : [] }
  }

  // viewOf is node p's view, made if there is none (a stranger's only
  // while fewer than maxStrangers are held; null then).
  viewOf (p, known = false) {
    let v = this.views.get(p)
    if (!v) {
      if (!known && [...this.views.values()].filter((x) => !x.known).length >= maxStrangers) return null
      v = newView()
      this.views.set(p, v)
    }
    return v
  }

  setRoster (p, ro) {
    const v = this.viewOf(p, true)
    v.known = true
    v.seen = now()
    if (ro.epoch === v.epoch && ro.rev < v.rev) return
    v.members = new Map((ro.members ?? []).map((m) => [m.agent, m]))
    v.epoch = ro.epoch
    v.rev = ro.rev
    v.mark = 0
    this.drain(v)
    this.emitMembers()
  }

  // drain applies the deltas that follow the view's rev.
  drain (v) {
    for (let w = v.pending.get(v.rev + 1); w && w.epoch === v.epoch; w = v.pending.get(v.rev + 1)) {
      v.pending.delete(v.rev + 1)
      if (w.t === 'leave') v.members.delete(w.member.agent)
      else v.members.set(w.member.agent, w.member)
      v.rev++
    }
    for (const [rev, w] of v.pending) {
      if (w.epoch < v.epoch || (w.epoch === v.epoch && rev <= v.rev)) v.pending.delete(rev)
    }
  }

  // vouched reports whether node p may be known (wire.md 8.1): on a
  // private cluster its request opened; on a public one the rendezvous
  // has it registered (looked up again, at most once a second).
  async vouched (p) {
    if (this.key || this.found.has(p)) return true
    if (now() - this.looked >= lookupPause) await this.lookup(false)
    return this.found.has(p)
  }

  async serveRoster (p, raw) {
    const q = JSON.parse(wire.fromUTF8(raw))
    if (q.cluster !== this.cluster || this.closed) return new Uint8Array(0)
    if (this.key && wire.fromB64(q.challenge ?? '').length !== 16) throw new Error('no challenge')
    const theirs = wire.decode(this.key, this.cluster, wire.rosterReqAD(p, this.self, q.challenge), wire.fromB64(q.body))
    if (!q.peek) {
      if (!(await this.vouched(p))) throw new Error('not registered at the rendezvous')
      wire.checkRoster(theirs, this.cluster)
      this.setRoster(p, theirs)
    }
    return wire.encode(this.key, this.cluster, wire.rosterRespAD(this.self, p, q.challenge), this.roster())
  }

  async serveReceipts (p, raw) {
    const q = JSON.parse(wire.fromUTF8(raw))
    for (const r of (q.receipts ?? []).slice(0, 512)) {
      const a = this.acks.get(r.id)
      if (!a || r.cluster !== this.cluster || !a.expect.delete(p)) continue
      a.delivered += Math.min(Math.max(Number(r.delivered) || 0, 0), 1 << 16)
      if (a.expect.size === 0) a.done()
    }
    return new Uint8Array(0)
  }

  // validate opens and checks topic message m (wire.md 4.3) and returns
  // it, or null: gossipsub forwards to other peers only what passes, so
  // that a page never relays what the nodes refuse (and loses no score
  // with them for it).
  validate (m) {
    if (m.type !== 'signed') return null
    try {
      const w = wire.decode(this.key, this.cluster, wire.topicAD(m.from.toString()), m.data)
      wire.checkWire(w, this.cluster)
      return w
    } catch {
      return null
    }
  }

  onMessage (m) {
    if (m.topic !== this.topic) return
    const origin = m.type === 'signed' ? m.from.toString() : ''
    if (origin === this.self || this.closed) return
    const w = this.validate(m)
    if (!w) return
    const v = this.viewOf(origin)
    if (!v) return
    v.seen = now()
    switch (w.t) {
      case 'msg': return this.deliver(origin, v, w)
      case 'join':
      case 'leave': return this.delta(origin, v, w)
      case 'beat': return this.beatFrom(origin, v, w)
      case 'bye':
        if (w.epoch === undefined || w.epoch === v.epoch) this.forget(origin)
    }
  }

  // deliver shows message w of node origin if it is for this page, and
  // tells a known origin how many received it here.
  deliver (origin, v, w) {
    const forMe = w.to == null || w.to.includes(this.me.agent)
    if (forMe) {
      const m = v.members.get(w.from)
      const did = v.known ? (w.from_did || null) : null
      const verified = did !== null && w.verified === true && m?.did === did && !!m.proof
      this.on.message({ from: w.from, from_did: did, verified, to: w.to ?? null, ts: w.ts, payload: w.payload, board: w.board, ref: w.ref })
    }
    if (v.known && this.connected(origin)) {
      const req = wire.utf8(JSON.stringify({ receipts: [{ cluster: this.cluster, id: w.id, delivered: forMe ? 1 : 0 }] }))
      request(this.node, origin, wire.receiptProto, req, 16).catch(() => {})
    }
  }

  delta (origin, v, w) {
    if ((w.epoch === v.epoch && w.rev <= v.rev) || w.epoch < v.epoch) return
    if (v.pending.size >= 4096) v.pending.clear()
    v.pending.set(w.rev, w)
    if (w.epoch !== v.epoch) {
      this.fetch(origin)
      return
    }
    this.drain(v)
    this.emitMembers()
  }

  beatFrom (origin, v, w) {
    if (this.rosterInBeat(origin, v, w)) return
    let stale = false
    if (w.epoch !== v.epoch) stale = true
    else if (v.rev < w.rev) {
      stale = v.mark !== 0 && v.rev < v.mark
      v.mark = w.rev
    } else if (v.rev === w.rev) {
      v.mark = 0
      stale = wire.digestOf([...v.members.values()]) !== w.digest
    } else v.mark = 0
    if (stale) this.fetch(origin)
  }

  // rosterInBeat takes the roster a beat of a peer nobody can dial (a
  // page) carries in its members (docs/wire.md, Browser peers) when the
  // view lags, the members match the beat's digest and the rendezvous
  // vouches for the peer: two pages cannot exchange rosters.
  rosterInBeat (origin, v, w) {
    const ms = w.members
    if (!Array.isArray(ms) || ms.length > maxBeatMembers || this.connected(origin) ||
      (w.epoch === v.epoch && w.rev <= v.rev) || wire.digestOf(ms) !== w.digest) return false
    try {
      wire.checkRoster({ epoch: w.epoch, rev: w.rev, members: ms }, this.cluster)
    } catch {
      return false
    }
    this.vouched(origin).then((ok) => {
      if (ok) this.setRoster(origin, { epoch: w.epoch, rev: w.rev, members: ms })
    })
    return true
  }

  // fetch replaces node p's view by an exchange, if the rendezvous
  // vouches for it.
  async fetch (p) {
    if (this.views.get(p)?.fetching || !(await this.vouched(p))) return
    await this.exchange(p)
  }

  forget (p) {
    if (this.views.delete(p)) this.emitMembers()
  }

  // expire forgets the nodes silent for presenceTimeout.
  expire () {
    for (const [p, v] of this.views) {
      if (now() - v.seen > wire.presenceTimeout) this.forget(p)
    }
  }

  async beat () {
    this.expire()
    const members = this.me ? [this.me] : []
    await this.publish({ t: 'beat', epoch: this.epoch, rev: this.rev, digest: wire.digestOf(members), members })
  }

  // publish numbers w among what the room publishes and publishes it;
  // it returns how many peers it went to.
  async publish (w) {
    w.at = now()
    w.n = ++this.n
    const data = wire.encode(this.key, this.cluster, wire.topicAD(this.self), w)
    const { recipients } = await this.pubsub.publish(this.topic, data)
    return recipients.length
  }

  // publishFirst publishes w once a peer takes it: a message published
  // before gossipsub opened its stream to any peer goes to nobody.
  async publishFirst (w) {
    for (let wait = 50; wait < 5000; wait *= 2) {
      if (this.pubsub.getSubscribers(this.topic).length > 0) {
        if (await this.publish({ ...w }) > 0) return
      }
      await new Promise((resolve) => setTimeout(resolve, wait))
    }
  }

  // send publishes a message of payload (to handles to, null: everyone)
  // and resolves with its ack: how many received it, on every node. The
  // page paces itself as a node paces a socket: sendRate messages a
  // second, in bursts of twice that; past it, send waits.
  async send (payload, to = null) {
    await this.pace()
    const w = {
      t: 'msg', id: wire.b64url(crypto.getRandomValues(new Uint8Array(12))), from: this.me.agent, ts: now(), payload, epoch: this.epoch, seq: ++this.seq
    }
    if (this.me.did) w.from_did = this.me.did
    if (this.me.proof) w.verified = true
    if (to) w.to = to
    wire.checkWire(w, this.cluster)
    const expect = new Set([...this.views].filter(([p, v]) => v.known && this.connected(p)).map(([p]) => p))
    const ack = new Promise((resolve) => {
      const a = { expect, delivered: 0 }
      const timer = setTimeout(() => a.done(), wire.ackWindow)
      a.done = () => {
        clearTimeout(timer)
        this.acks.delete(w.id)
        resolve({ id: w.id, delivered: a.delivered, complete: a.expect.size === 0 })
      }
      this.acks.set(w.id, a)
      if (expect.size === 0) a.done()
    })
    if (await this.publish(w) === 0 && expect.size > 0) {
      this.seq--
      this.acks.get(w.id)?.done()
      throw new Error('not sent: no node took the message')
    }
    return ack
  }

  // pace waits for the token bucket of sendRate to hold one message.
  async pace () {
    for (;;) {
      const t = now()
      this.tokens = Math.min(2 * sendRate, (this.tokens ?? 2 * sendRate) + ((t - (this.filled ?? t)) * sendRate) / 1000)
      this.filled = t
      if (this.tokens >= 1) {
        this.tokens--
        return
      }
      await new Promise((resolve) => setTimeout(resolve, ((1 - this.tokens) * 1000) / sendRate))
    }
  }

  // onDisconnect redials a node of the cluster that went away, with
  // backoff, and exchanges rosters again (it may have restarted); the
  // home node's addresses are fetched anew (its certificates rotate).
  onDisconnect (p) {
    if (this.closed) return
    const home = peerOf(this.home[0]) === p
    const rendezvous = this.rendezvous.some((a) => peerOf(a) === p)
    if (!home && !rendezvous && !this.views.get(p)?.known) return
    if (home) this.on.status('reconnecting')
    const wait = this.redial.get(p) ?? retryMin
    this.redial.set(p, Math.min(2 * wait, retryMax))
    setTimeout(() => this.reconnect(p, home, rendezvous), wait * (0.75 + Math.random() / 2))
  }

  async reconnect (p, home, rendezvous) {
    if (this.closed || this.connected(p)) return
    try {
      if (home || rendezvous) {
        const fresh = await this.refresh().catch(() => null)
        if (fresh) Object.assign(this, { home: fresh.home, rendezvous: fresh.rendezvous })
        await this.dialPeer([...this.home, ...this.rendezvous].filter((a) => peerOf(a) === p))
      }
      if (rendezvous) await this.lookup(true)
      await this.exchange(p)
      if (!this.connected(p)) throw new Error('not connected')
      this.redial.delete(p)
      if (home) this.on.status('joined')
    } catch {
      this.onDisconnect(p)
    }
  }

  // close says goodbye and leaves: the nodes take the member offline at
  // once (and at the latest when the connections close).
  async close () {
    if (this.closed) return
    this.closed = true
    for (const t of this.timers) clearInterval(t)
    try {
      await this.publish({ t: 'bye', epoch: this.epoch, seq: this.seq })
    } catch {}
  }

  // members lists everyone online, this page's member included, by handle.
  members () {
    const all = new Map()
    for (const v of this.views.values()) for (const [h, m] of v.members) all.set(h, m)
    if (this.me) all.set(this.me.agent, this.me)
    return [...all.values()].sort((a, b) => (a.agent < b.agent ? -1 : a.agent > b.agent ? 1 : 0))
  }

  emitMembers () {
    this.on.members(this.members())
  }
}
