// Puts the harness table (../harnesses.json, shared with the Python SDK) into the build, beside
// the module that reads it (dist/src/harness/table.js), so that the package ships it.
import { copyFileSync, mkdirSync } from "node:fs";

const source = new URL("../../harnesses.json", import.meta.url);
const target = new URL("../dist/src/harness/harnesses.json", import.meta.url);
mkdirSync(new URL(".", target), { recursive: true });
copyFileSync(source, target);
