// Marks dist/cjs as CommonJS: the package is "type": "module", so without this Node
// (and TypeScript) would read the CommonJS build's .js and .d.ts files as ESM.
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const js = join(dirname(fileURLToPath(import.meta.url)), "..");
writeFileSync(join(js, "dist/cjs/package.json"), `${JSON.stringify({ type: "commonjs" })}\n`);
