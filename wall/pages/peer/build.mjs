// Builds ../web/static/peer.js, the bundle the node embeds, from src/ and
// the packages of package-lock.json (`npm ci`, then `npm run build`); an
// argument writes it elsewhere (CI builds it aside and compares). The
// build is reproducible: the same sources and lockfile give the same
// bytes (no source map, no path, no timestamp).
import { build } from 'esbuild'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))

await build({
  absWorkingDir: here,
  entryPoints: ['src/main.js'],
  outfile: resolve(process.argv[2] ?? join(here, '../web/static/peer.js')),
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: ['chrome120', 'firefox120', 'safari17'],
  minify: true,
  legalComments: 'eof',
  sourcemap: false,
  charset: 'utf8',
  logLevel: 'warning'
})
