#!/usr/bin/env bash
# Copies the web UI's front-end libraries from their npm packages into the Python package, so
# the server needs neither npm nor a network at run time. Versions: frontend/package.json.
set -euo pipefail
cd "$(dirname "$0")/../frontend"
if [[ -f package-lock.json ]]; then
    npm ci --ignore-scripts --no-audit --no-fund
else
    npm install --ignore-scripts --no-audit --no-fund
fi
vendor=../src/mlyard/web/static/vendor
rm -rf "$vendor"
mkdir -p "$vendor/htmx.org" "$vendor/uplot" "$vendor/swagger-ui-dist" "$vendor/@annotorious/annotorious"
cp node_modules/htmx.org/dist/htmx.min.js node_modules/htmx.org/LICENSE "$vendor/htmx.org/"
cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css node_modules/uplot/LICENSE \
    "$vendor/uplot/"
# The API docs page (/api/v1/docs): the bundle and its stylesheet only; web/static/api_docs.js starts it.
cp node_modules/swagger-ui-dist/swagger-ui-bundle.js node_modules/swagger-ui-dist/swagger-ui.css \
    node_modules/swagger-ui-dist/LICENSE "$vendor/swagger-ui-dist/"
# The labeling page's box drawing: the UMD bundle (its dependencies inside) and its stylesheet. The
# package ships no LICENSE file; its package.json names the licence (BSD-3-Clause) and author.
cp node_modules/@annotorious/annotorious/dist/annotorious.js node_modules/@annotorious/annotorious/dist/annotorious.css \
    node_modules/@annotorious/annotorious/package.json "$vendor/@annotorious/annotorious/"
# The versions the copies came from, read by the server and checked by tests/web/test_web_assets.py.
node -e '
const fs = require("fs");
const versions = {};
for (const name of ["@annotorious/annotorious", "htmx.org", "swagger-ui-dist", "uplot"]) {
  versions[name] = JSON.parse(fs.readFileSync(`node_modules/${name}/package.json`)).version;
}
fs.writeFileSync(process.argv[1], JSON.stringify(versions, null, 2) + "\n");
' "$vendor/versions.json"
ls -l "$vendor"/*
