// tests/reference/tensorboard_browser.mjs — a headless Chromium (Debian's /usr/bin/chromium, driven by
// the npm package playwright-core: package.json, scripts/fetch-assets) opens the Scalars dashboard of a
// running `tensorboard --logdir` and checks that the tag's card is shown with a chart that has data.
// Started by tests/reference/check_tensorboard_browser.py, which runs tensorboard on a run written by
// twinkle.
//
//   node tensorboard_browser.mjs --url http://127.0.0.1:PORT/ --tag 'lm loss' --steps 6 \
//        --screenshot OUT.png --user-data-dir DIR [--chromium /usr/bin/chromium]
//
// Checks (each failure printed as "FAIL: ..." and exit 1):
//   1. the browser's own request for the tag's series (the Scalars plugin's
//      data/plugin/scalars/scalars_multirun) answers 200 with --steps points, steps 1..N;
//   2. the page shows a card titled with the tag, and its chart has drawn the series: a non-empty
//      <canvas> (the WebGL renderer) or a series line, an SVG <path class="line"> of 2 or more points
//      (the SVG renderer, what --disable-gpu gives; the chart crops points outside the y range its
//      "Ignore outliers" setting picks, so not always all --steps);
//   3. a screenshot of the page is written to --screenshot.
// Exit 0 and "browser check OK: ..." on success; exit 77 (CTest's SKIP_RETURN_CODE) when playwright-core
// or the chromium binary is missing.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const chromiumPath = args.chromium || '/usr/bin/chromium';
const tag = args.tag || 'lm loss';
const steps = Number(args.steps || 0);
const tagPattern = tag.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

// playwright-core from the repository's node_modules (this file lives in tests/reference/)
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
let chromium;
try {
  chromium = createRequire(path.join(root, 'package.json'))('playwright-core').chromium;
} catch (e) {
  console.log(`SKIP: playwright-core is not installed in ${root}/node_modules (scripts/setup installs it): ${e.message}`);
  process.exit(77);
}
if (!fs.existsSync(chromiumPath)) {
  console.log(`SKIP: no ${chromiumPath} (scripts/setup installs Debian's chromium)`);
  process.exit(77);
}

const failures = [];
// a fresh profile per run (--user-data-dir: playwright passes it for a persistent context)
const browser = await chromium.launchPersistentContext(args['user-data-dir'], {
  executablePath: chromiumPath,
  headless: true,
  viewport: { width: 1280, height: 900 },
  // a closed network: no QUIC, no background fetches, no component or sync updates
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const page = browser.pages()[0] || await browser.newPage();
  const series = [];
  page.on('response', async (r) => {
    // the Scalars dashboard fetches a tag's series with POST data/plugin/scalars/scalars_multirun
    // (form fields tag, runs; answer {run: [[wall_time, step, value], ...]}), older versions with
    // GET data/plugin/scalars/scalars?tag=&run= (answer [[wall_time, step, value], ...])
    const u = new URL(r.url());
    const post = r.request().postData() || '';
    const multirun = u.pathname.endsWith('/data/plugin/scalars/scalars_multirun') &&
                     new RegExp(`name="tag"\\r?\\n\\r?\\n${tagPattern}\\r?\\n`).test(post);
    const single = u.pathname.endsWith('/data/plugin/scalars/scalars') && u.searchParams.get('tag') === tag;
    if (!multirun && !single) return;
    try {
      const body = await r.json();
      series.push({ status: r.status(), rows: Array.isArray(body) ? body : Object.values(body).flat() });
    } catch (e) {
      series.push({ status: r.status(), error: String(e) });
    }
  });
  const url = new URL(args.url);
  // the Scalars dashboard with its tag filter set to the tag (a regular expression): the matching cards
  // show in one expanded pane (without it, panes past the first two start collapsed)
  url.hash = `#scalars&tagFilter=${encodeURIComponent(`^${tagPattern}$`)}`;
  await page.goto(url.toString(), { waitUntil: 'load', timeout: 30000 });
  // the card whose title is the tag (the legacy Scalars dashboard: tf-scalar-card; its tf-card-heading
  // shows the tag), then its chart's drawing
  const card = page.locator('tf-scalar-card', { hasText: tag }).first();
  try {
    await card.waitFor({ state: 'visible', timeout: 20000 });
  } catch (e) {
    failures.push(`no visible card for the tag '${tag}' on ${url} within 20 s`);
  }
  let drawn = null;
  if (!failures.length) {
    const deadline = Date.now() + 20000;
    while (Date.now() < deadline) {
      drawn = await card.evaluate((el) => {
        // walk the card's light and shadow DOM for the chart's canvas / SVG paths
        const found = { canvas: 0, paths: 0, vertices: 0 };
        const visit = (n) => {
          if (!n) return;
          if (n.tagName === 'CANVAS' && n.width > 0 && n.height > 0) found.canvas += 1;
          // a series' line (vz-line-chart2's Plottable line plot: <path class="line">, one M / L command per
          // point; the card's icon buttons are paths too, without the class)
          if (n.tagName === 'path' && n.getAttribute('class') === 'line' && (n.getAttribute('d') || '').length > 0) {
            found.paths += 1;
            found.vertices = Math.max(found.vertices, ((n.getAttribute('d') || '').match(/[ML]/g) || []).length);
          }
          if (n.shadowRoot) visit(n.shadowRoot);
          for (const c of n.children || []) visit(c);
        };
        visit(el);
        return found;
      });
      if (series.length && (drawn.canvas > 0 || drawn.vertices >= 2)) break;
      await page.waitForTimeout(250);
    }
    if (!drawn || (drawn.canvas === 0 && drawn.vertices < 2))
      failures.push(`the '${tag}' card has no drawn chart: no canvas, no series line of 2 or more points ` +
                    `(${JSON.stringify(drawn)})`);
  }
  // 1. what the page fetched for the tag
  const ok = series.find((s) => s.status === 200 && Array.isArray(s.rows));
  if (!ok) {
    failures.push(`the page made no successful request for the '${tag}' series (${JSON.stringify(series).slice(0, 300)})`);
  } else {
    // the Scalars plugin's rows: [wall_time, step, value]
    const got = ok.rows.map((row) => row[1]);
    const want = Array.from({ length: steps }, (_, i) => i + 1);
    if (JSON.stringify(got) !== JSON.stringify(want))
      failures.push(`the '${tag}' series the page fetched has steps ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
    else console.log(`'${tag}' series fetched by the page: steps 1..${steps}, values ${JSON.stringify(ok.rows.map((r) => r[2]))}`);
  }
  // the viewport as it is (a full-page capture resizes it, and the chart redraws after the capture)
  await card.scrollIntoViewIfNeeded().catch(() => {});
  await page.waitForTimeout(300);
  await page.screenshot({ path: args.screenshot });
  console.log(`screenshot: ${args.screenshot}` + (drawn ? ` (chart: ${drawn.canvas} canvas, ${drawn.paths} series lines, the longest of ${drawn.vertices} points)` : ''));
} finally {
  await browser.close();
}
if (failures.length) {
  console.log('FAIL:\n  ' + failures.join('\n  '));
  process.exit(1);
}
console.log(`browser check OK: tensorboard's Scalars page shows the '${tag}' card with a drawn chart of ${steps} steps`);
