// Builds tool.js into a component of world `tool` (anchor:tool@1.0.0).
//
//   node build.mjs OUT.wasm
//
// Offline: ComponentizeJS ships its engine and Wizer in node_modules. Every
// WASI feature of the engine is disabled, so the component imports no WASI
// interface, only the world's types: the host gives tools no capabilities.
// Prints `OUT.wasm SIZE bytes` on success; exits 1 with a message otherwise.

import { Buffer } from 'node:buffer';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import process from 'node:process';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const witPath = resolve(here, '../../../wit/tool@1.0.0');
const sourcePath = resolve(here, 'tool.js');

function fail(message) {
  process.stderr.write(`build.mjs: ${message}\n`);
  process.exit(1);
}

if (process.argv.length !== 3) {
  fail('usage: node build.mjs OUT.wasm');
}
// Resolved before the chdir below: OUT.wasm is relative to the caller.
const out = resolve(process.argv[2]);

let componentize;
try {
  ({ componentize } = await import('@bytecodealliance/componentize-js'));
} catch (e) {
  fail(`cannot load @bytecodealliance/componentize-js (run \`npm ci\` in ${here}): ${e.message}`);
}

// ComponentizeJS maps the source's directory into the engine relative to the
// working directory (and mishandles a working directory of `/`): build from
// this folder, so the paths baked into the component are the same wherever
// the build is started from.
process.chdir(here);

let component;
try {
  ({ component } = await componentize({
    sourcePath,
    witPath,
    worldName: 'tool',
    disableFeatures: ['stdio', 'random', 'clocks', 'http', 'fetch-event'],
  }));
} catch (e) {
  fail(`componentize failed: ${e && e.message ? e.message : e}`);
}

// The world imports no function and every engine feature is off, so the
// component's own imports may only be the world's types: no WASI interface
// (`wasi:cli/environment@0.2.3`, ...) nor anything else the host would have to
// provide. (The bytes `wasi:` do occur inside the engine's core module, as
// names of its unused core exports, so a byte scan would not tell.)
let imports;
try {
  imports = topLevelImports(component);
} catch (e) {
  fail(`cannot read the component's imports: ${e.message}`);
}
const extra = imports.filter(
  ({ name, kind }) => kind !== 'type' && name !== 'anchor:tool/types@1.0.0',
);
if (extra.length > 0) {
  fail(`the component imports more than the world's types: ${extra.map((i) => i.name).join(', ')}`);
}

try {
  await mkdir(dirname(out), { recursive: true });
  await writeFile(out, component);
} catch (e) {
  fail(`cannot write ${out}: ${e.message}`);
}
process.stdout.write(`${out} ${component.length} bytes\n`);

/**
 * The names and kinds of a component's top-level imports, read from its
 * import sections (component binary format, section id 10).
 *
 * @param {Uint8Array} bytes
 * @returns {{ name: string, kind: string }[]}
 */
function topLevelImports(bytes) {
  const preamble = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
  if (bytes.length < 8 || preamble.some((b, i) => bytes[i] !== b)) {
    throw new Error('not a component (bad preamble)');
  }
  let pos = 8;
  const byte = () => {
    if (pos >= bytes.length) throw new Error('unexpected end of the binary');
    return bytes[pos++];
  };
  const u32 = () => {
    let value = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      const b = byte();
      value += (b & 0x7f) * 2 ** shift;
      if ((b & 0x80) === 0) return value;
    }
    throw new Error('bad LEB128');
  };
  const string = () => {
    const len = u32();
    const text = Buffer.from(bytes.subarray(pos, pos + len)).toString('utf8');
    pos += len;
    return text;
  };
  const kinds = ['module', 'func', 'value', 'type', 'component', 'instance'];
  const imports = [];
  while (pos < bytes.length) {
    const id = byte();
    const size = u32();
    const end = pos + size;
    if (id === 10) {
      for (let n = u32(); n > 0; n--) {
        const tag = byte();
        const name = string();
        if (tag === 0x01) string(); // a version suffix
        else if (tag !== 0x00) throw new Error(`unknown import name form 0x${tag.toString(16)}`);
        const kind = byte();
        if (kind === 0x00) byte(); // core:sort 0x11
        if (kind === 0x02 || kind === 0x03) {
          if (byte() === 0x00) u32(); // a bound on an index; 0x01 is a type / `sub resource`
          else if (kind === 0x02) u32();
        } else if (kind <= 0x05) {
          u32();
        } else {
          throw new Error(`unknown import kind 0x${kind.toString(16)}`);
        }
        imports.push({ name, kind: kinds[kind] });
      }
      if (pos !== end) throw new Error('import section size mismatch');
    }
    pos = end;
  }
  return imports;
}
