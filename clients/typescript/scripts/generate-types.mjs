#!/usr/bin/env node
// generate-types writes src/generated/ from the CustomResourceDefinitions in
// config/crd/bases (what `make manifests` generates from api/v1alpha1), so the
// TypeScript types say exactly what the API server accepts: the same fields,
// enums, required fields and descriptions `kubectl explain` prints. `make
// generate` runs it (`npm run generate` here does too) and CI fails when the
// committed output differs.
//
// It reads only the structural-schema subset controller-gen emits: object,
// array, string, integer, number, boolean, enum, additionalProperties,
// x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields and
// nullable; anything else stops it with an error rather than producing a
// silently wrong type.
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import yaml from 'js-yaml';

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const repoRoot = join(pkgDir, '..', '..');
const crdDir = join(repoRoot, 'config', 'crd', 'bases');
const outDir = join(pkgDir, 'src', 'generated');

const known = new Set([
  'type', 'description', 'properties', 'required', 'items', 'enum', 'default', 'format',
  'additionalProperties', 'nullable', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum',
  'minLength', 'maxLength', 'pattern', 'minItems', 'maxItems', 'minProperties', 'maxProperties',
  'x-kubernetes-int-or-string', 'x-kubernetes-preserve-unknown-fields', 'x-kubernetes-validations',
  'x-kubernetes-list-type', 'x-kubernetes-list-map-keys', 'x-kubernetes-map-type',
]);

// doc renders a JSDoc block: the description and the constraints the API
// server enforces, so they show up in an editor's hover.
function doc(schema, indent) {
  const lines = [];
  if (schema.description) lines.push(...schema.description.split('\n'));
  const tags = [];
  if (schema.default !== undefined) tags.push(`@default ${JSON.stringify(schema.default)}`);
  if (schema.format === 'date-time') tags.push('Format: RFC 3339 time, e.g. "2026-01-02T15:04:05Z".');
  for (const k of ['minimum', 'maximum', 'minLength', 'maxLength', 'minItems', 'maxItems', 'pattern']) {
    if (schema[k] !== undefined) tags.push(`${k}: ${schema[k]}`);
  }
  for (const v of schema['x-kubernetes-validations'] ?? []) {
    tags.push(`Validated: ${(v.message ?? v.rule).replace(/\s+/g, ' ')}`);
  }
  if (tags.length > 0) {
    if (lines.length > 0) lines.push('');
    lines.push(...tags);
  }
  if (lines.length === 0) return '';
  const body = lines.map((l) => `${indent} *${l ? ' ' + l.replace(/\*\//g, '*\\/') : ''}`);
  return `${indent}/**\n${body.join('\n')}\n${indent} */\n`;
}

function propertyName(name) {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(name) ? name : JSON.stringify(name);
}

// typeOf renders schema as a TypeScript type; nested objects are inline
// object types (indent is the indentation of the line the type starts on).
function typeOf(schema, indent, path) {
  for (const k of Object.keys(schema)) {
    if (!known.has(k)) throw new Error(`${path}: unsupported schema keyword ${k}`);
  }
  let t;
  if (schema['x-kubernetes-int-or-string']) {
    t = 'number | string';
  } else if (schema.enum) {
    t = schema.enum.map((v) => JSON.stringify(v)).join(' | ');
  } else {
    switch (schema.type) {
      case 'string':
        t = 'string';
        break;
      case 'integer':
      case 'number':
        t = 'number';
        break;
      case 'boolean':
        t = 'boolean';
        break;
      case 'array': {
        if (!schema.items) throw new Error(`${path}: array without items`);
        const item = typeOf(schema.items, indent, `${path}[]`);
        t = /^[\w.]+$/.test(item) ? `${item}[]` : `Array<${item}>`;
        break;
      }
      case 'object':
        t = objectType(schema, indent, path);
        break;
      case undefined:
        if (schema['x-kubernetes-preserve-unknown-fields']) {
          t = 'unknown';
          break;
        }
      // falls through
      default:
        throw new Error(`${path}: unsupported type ${schema.type}`);
    }
  }
  return schema.nullable ? `${t} | null` : t;
}

function objectType(schema, indent, path) {
  if (schema.properties) {
    const required = new Set(schema.required ?? []);
    const inner = indent + '  ';
    const fields = Object.keys(schema.properties).sort().map((name) => {
      const prop = schema.properties[name];
      const opt = required.has(name) ? '' : '?';
      return `${doc(prop, inner)}${inner}${propertyName(name)}${opt}: ${typeOf(prop, inner, `${path}.${name}`)};\n`;
    });
    return `{\n${fields.join('')}${indent}}`;
  }
  if (schema.additionalProperties && typeof schema.additionalProperties === 'object') {
    return `{ [key: string]: ${typeOf(schema.additionalProperties, indent, `${path}{}`)} }`;
  }
  // An object without a schema for its fields (preserve-unknown-fields, or
  // additionalProperties: true) holds anything.
  return '{ [key: string]: unknown }';
}

// generate renders one CRD as a module: the resource's coordinates, the
// kind's interface, and its spec and status as named interfaces.
function generate(crd, source) {
  const { group, names, scope } = crd.spec;
  const versions = crd.spec.versions.filter((v) => v.served);
  if (versions.length !== 1) {
    throw new Error(`${source}: ${versions.length} served versions; the generator handles exactly one`);
  }
  const version = versions[0];
  const root = version.schema.openAPIV3Schema;
  const kind = names.kind;
  const apiVersion = `${group}/${version.name}`;
  const required = new Set(root.required ?? []);
  const props = root.properties ?? {};
  for (const name of Object.keys(props)) {
    if (!['apiVersion', 'kind', 'metadata', 'spec', 'status'].includes(name)) {
      throw new Error(`${source}: unexpected top-level field ${name}`);
    }
  }

  let out = `// Code generated by clients/typescript/scripts/generate-types.mjs from ${source}. DO NOT EDIT.\n\n`;
  out += `import type { V1ObjectMeta } from '@kubernetes/client-node';\n\n`;
  out += `/** Where the API server serves ${kind} objects. */\n`;
  out += `export const ${names.singular}Resource = {\n`;
  out += `  group: ${JSON.stringify(group)},\n`;
  out += `  version: ${JSON.stringify(version.name)},\n`;
  out += `  apiVersion: ${JSON.stringify(apiVersion)},\n`;
  out += `  kind: ${JSON.stringify(kind)},\n`;
  out += `  plural: ${JSON.stringify(names.plural)},\n`;
  out += `  namespaced: ${scope === 'Namespaced'},\n`;
  out += `} as const;\n\n`;

  out += doc(root, '');
  out += `export interface ${kind} {\n`;
  const field = (name, type) => {
    const opt = required.has(name) ? '' : '?';
    out += `${doc(props[name], '  ')}  ${name}${opt}: ${type};\n`;
  };
  if (props.apiVersion) field('apiVersion', JSON.stringify(apiVersion));
  if (props.kind) field('kind', JSON.stringify(kind));
  if (props.metadata) field('metadata', 'V1ObjectMeta');
  if (props.spec) field('spec', `${kind}Spec`);
  if (props.status) field('status', `${kind}Status`);
  out += `}\n`;
  for (const part of ['spec', 'status']) {
    if (!props[part]) continue;
    const name = `${kind}${part[0].toUpperCase()}${part.slice(1)}`;
    out += `\n${doc(props[part], '')}export interface ${name} ${objectType(props[part], '', `${kind}.${part}`)}\n`;
  }
  return { file: names.singular, out };
}

function main() {
  const sources = readdirSync(crdDir).filter((f) => f.endsWith('.yaml')).sort();
  if (sources.length === 0) throw new Error(`no CRDs in ${crdDir}: run make manifests`);
  const modules = [];
  for (const f of sources) {
    const path = join(crdDir, f);
    for (const crd of yaml.loadAll(readFileSync(path, 'utf8'))) {
      if (crd?.kind !== 'CustomResourceDefinition') continue;
      modules.push(generate(crd, relative(repoRoot, path)));
    }
  }
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  let index = `// Code generated by clients/typescript/scripts/generate-types.mjs. DO NOT EDIT.\n\n`;
  for (const m of modules.sort((a, b) => a.file.localeCompare(b.file))) {
    writeFileSync(join(outDir, `${m.file}.ts`), m.out);
    index += `export * from './${m.file}.js';\n`;
  }
  writeFileSync(join(outDir, 'index.ts'), index);
  console.log(`Generated ${relative(repoRoot, outDir)}/ from ${modules.length} CRDs in ${relative(repoRoot, crdDir)}/`);
}

try {
  main();
} catch (err) {
  console.error(`generate-types: ${err.message}`);
  process.exit(1);
}
