// Validates CTRF reports with the ctrf npm package's own validator (validateStrict): the
// reference implementation, not only its schema. Run: NODE_PATH=.ci/.node/node_modules node
// tests/ctrf_validate.cjs FILE...
const { readFileSync } = require("node:fs");
const { validateStrict } = require("ctrf");

for (const file of process.argv.slice(2)) {
  validateStrict(JSON.parse(readFileSync(file, "utf8")));
  console.log(`valid ${file}`);
}
