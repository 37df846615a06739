// hooks.mjs — the module resolve hook of register.mjs (node:module customization hooks).
const FS = new URL('./fs.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') &&
      context.parentURL?.includes('/node_modules/@modelcontextprotocol/conformance/'))
    return { url: FS, shortCircuit: true };
  return next(specifier, context);
}
