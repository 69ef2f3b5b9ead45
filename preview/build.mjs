// Bundles the renderer page (src/main.tsx) into dist/preview.js and copies @grafana/ui's icons beside it: the
// page runs from file:// in headless Chromium, with nothing fetched from the network.
import { cpSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { build } from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, 'dist');
const began = performance.now();

await build({
  entryPoints: [join(here, 'src', 'main.tsx')],
  outfile: join(dist, 'preview.js'),
  bundle: true,
  minify: true,
  format: 'iife',
  target: 'chrome120',
  define: { 'process.env.NODE_ENV': '"production"' },
  alias: Object.fromEntries(
    ['monaco-editor', 'react-custom-scrollbars-2'].map((name) => [name, join(here, 'src', 'shims', `${name}.ts`)])
  ),
  logLevel: 'warning',
});

// Icon looks for `${window.__grafana_public_path__}img/icons/<kind>/<name>.svg` (the page sets the path to dist/).
cpSync(join(here, 'node_modules', '@grafana', 'ui', 'dist', 'public', 'img'), join(dist, 'img'), { recursive: true });

const seconds = ((performance.now() - began) / 1000).toFixed(1);
const megabytes = (statSync(join(dist, 'preview.js')).size / 1e6).toFixed(2);
console.log(`preview: dist/preview.js ${megabytes} MB in ${seconds} s`);
