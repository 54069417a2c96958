// Builds tool.js into a component of world `tool` (anchor:tool@1.0.0), offline:
//
//   npm install && node build.mjs tool.wasm
//
// Every WASI feature of the engine is off: the service gives tools no
// capability and refuses a component that imports one.
import { writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { componentize } from '@bytecodealliance/componentize-js';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? 'tool.wasm');
process.chdir(here);
const { component } = await componentize({
  sourcePath: resolve(here, 'tool.js'),
  witPath: resolve(here, 'wit'),
  worldName: 'tool',
  disableFeatures: ['stdio', 'random', 'clocks', 'http', 'fetch-event'],
});
await writeFile(out, component);
console.log(`${out} ${component.length} bytes`);
