// The page's libp2p peer: js-libp2p with the two transports a page has
// (WebTransport, WebRTC-direct: both secure and multiplex themselves, so
// no connection encrypter or stream muxer is bundled), identify, and
// gossipsub with its defaults (StrictSign, js-libp2p's message ids, which
// the nodes use too: docs/wire.md 2.2). Nobody dials a page: it listens on
// nothing and dials the nodes, whose addresses carry their certificate
// hashes.

import { gossipsub } from '@libp2p/gossipsub'
import { identify } from '@libp2p/identify'
import { peerIdFromString } from '@libp2p/peer-id'
import { lpStream } from '@libp2p/utils'
import { webRTCDirect } from '@libp2p/webrtc'
import { webTransport } from '@libp2p/webtransport'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'

// streamTimeout bounds one request/response exchange (wire.md 7.1).
const streamTimeout = 30000

export const WEBTRANSPORT = 'webtransport'
export const WEBRTC = 'webrtc-direct'

// transportOf names the transport of address a, '' for one a page cannot
// dial (no certificate hash).
export function transportOf (a) {
  if (!a.includes('/certhash/')) return ''
  if (a.includes('/webtransport/')) return WEBTRANSPORT
  if (a.includes('/webrtc-direct/')) return WEBRTC
  return ''
}

// preferredTransport is the transport a page uses: WebTransport where the
// page is a secure context (https, localhost) and has it, WebRTC-direct
// otherwise; want overrides it.
export function preferredTransport (want) {
  if (want === WEBTRANSPORT || want === WEBRTC) return want
  return globalThis.isSecureContext && typeof globalThis.WebTransport === 'function' ? WEBTRANSPORT : WEBRTC
}

// peerOf is the peer id string an address ends with.
export const peerOf = (a) => a.slice(a.lastIndexOf('/p2p/') + 5)

// createPeer starts a libp2p peer of key (a libp2p private key). Loopback
// and private addresses are dialled like any other (js-libp2p's browser
// build refuses them unless the gater allows them): a node on a LAN, or a
// test's, is as good as a public one.
export async function createPeer (key) {
  return createLibp2p({
    privateKey: key,
    addresses: { listen: [] },
    transports: [webTransport(), webRTCDirect()],
    connectionGater: { denyDialMultiaddr: () => false },
    connectionManager: { maxConnections: 64 },
    services: {
      identify: identify({ agentVersion: 'mesh-page' }),
      pubsub: gossipsub({ allowPublishToZeroTopicPeers: true, fallbackToFloodsub: false, heartbeatInterval: 700 })
    }
  })
}

// dial connects node to the first of addrs that answers.
export async function dial (node, addrs, signal) {
  let last = new Error('no address to dial')
  for (const a of addrs) {
    try {
      return await node.dial(multiaddr(a), { signal })
    } catch (err) {
      last = err
    }
  }
  throw last
}

// request sends one frame to peer p on proto and returns the answer frame
// (wire.md 7.1), at most max bytes.
export async function request (node, p, proto, body, max) {
  const signal = AbortSignal.timeout(streamTimeout)
  const stream = await node.dialProtocol(typeof p === 'string' ? peerIdFromString(p) : p, proto, { signal })
  try {
    const lp = lpStream(stream, { maxDataLength: max })
    await lp.write(body, { signal })
    await stream.close({ signal })
    return (await lp.read({ signal })).subarray()
  } catch (err) {
    stream.abort(err)
    throw err
  }
}

// serve answers proto with fn(remote peer id string, request bytes) ->
// answer bytes; an error resets the stream.
export async function serve (node, proto, max, fn) {
  await node.handle(proto, async (stream, conn) => {
    const signal = AbortSignal.timeout(streamTimeout)
    try {
      const lp = lpStream(stream, { maxDataLength: max })
      const req = (await lp.read({ signal })).subarray()
      await lp.write(await fn(conn.remotePeer.toString(), req), { signal })
      await stream.close({ signal })
    } catch (err) {
      stream.abort(err)
    }
  }, { maxInboundStreams: 16 })
}
