// The cluster page's peer (docs/api.md, Browser peers): join(opts) makes
// the page a libp2p peer of the mesh in one cluster, with no WebSocket
// between: it dials the node the page came from directly, subscribes to
// the cluster's topic and speaks the wire (room.js). The page's scripts
// (cluster.js, private.js) load this bundle only when a visitor joins.

import { didKeyOf, peerKey } from './keys.js'
import { createPeer, preferredTransport } from './net.js'
import { Room } from './room.js'
import { checkVectors, proveKey, validHandle, wireKey } from './wire.js'

export { preferredTransport }

// JoinError is a refusal the page shows as it is.
export class JoinError extends Error {}

// challengeOf fetches a challenge of the home node for a proof of key; a
// private cluster's is given only for its token, so this checks the token
// too.
async function challengeOf (cluster, token) {
  const headers = { Accept: 'application/json' }
  if (token) headers['X-Cluster-Token'] = token
  const resp = await fetch(`/v1/clusters/${encodeURIComponent(cluster)}/challenge`, { headers, cache: 'no-store' })
  if (resp.status === 404) throw new JoinError(token ? 'no such cluster, or the token is not its member token' : 'no such cluster')
  if (!resp.ok) throw new JoinError(`the node answered ${resp.status} for a challenge`)
  return (await resp.json()).challenge
}

// join joins cluster as handle and resolves with the session once the
// cluster's nodes know the page. opts:
//   cluster, handle; token (a private cluster's member token: the page
//   derives the wire key and seals and opens everything itself);
//   pem (a key the visitor brings, PKCS#8 PEM; else the page's own);
//   transport ('webtransport' or 'webrtc-direct'; else by the page's
//   origin); home, rendezvous (addresses: the node's, the rendezvous
//   nodes'), refresh (async: fresh {home, rendezvous});
//   on: {message(m), members(list), status(state)}.
export async function join (opts) {
  checkVectors()
  if (!validHandle(opts.handle)) throw new JoinError('a handle is 1 to 64 bytes of printable text, without spaces')
  if (!opts.home || opts.home.length === 0) throw new JoinError('this node does not listen for browsers')
  const key = opts.token ? wireKey(opts.token, opts.cluster) : null
  const challenge = await challengeOf(opts.cluster, opts.token)
  const dk = await didKeyOf(opts.pem)
  const me = { agent: opts.handle, vis: 'public', did: dk.did, challenge }
  me.proof = await proveKey((b) => dk.sign(b), dk.pub, opts.cluster, opts.handle, challenge)
  const node = await createPeer(await peerKey())
  const transport = preferredTransport(opts.transport)
  const room = new Room({ node, cluster: opts.cluster, key, transport, home: opts.home, rendezvous: opts.rendezvous, refresh: opts.refresh, on: opts.on })
  try {
    await room.start(me)
  } catch (err) {
    await node.stop()
    throw err
  }
  let left = null
  const leave = () => {
    left ??= room.close().finally(() => node.stop())
    return left
  }
  // A closing tab stops the peer: its connections close at once, which the
  // nodes take as its goodbye, whether or not the goodbye itself went out.
  addEventListener('pagehide', leave, { once: true })
  return {
    peerId: node.peerId.toString(),
    did: dk.did,
    transport,
    send: (payload, to) => room.send(payload, to),
    members: () => room.members(),
    leave
  }
}
