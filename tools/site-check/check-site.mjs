// check-site.mjs: opens the built Doxygen site in headless Chromium and checks
// what a reader would see on every chapter, concept and help page, and the glossary.
//   node check-site.mjs HTML_DIR SCREENSHOT_DIR
// Serves HTML_DIR on 127.0.0.1, then, for each page: the title is there, no raw
// Doxygen command leaked into the text, every image and diagram loads, and
// every internal link resolves, and the pages with a plot or a sequence diagram show it; the
// glossary defines each required term in an entry of its own.
// Every diagram (\dot and \msc) on every page is shown whole at 1400 px and at 900 px, in the
// light and the dark theme: inside the text column, not cropped, not squashed, and inverted in
// the dark theme; each is saved as SCREENSHOT_DIR/diagrams/PAGE-N-WIDTH-THEME.png.
// Saves screenshots of the main page, of the latest chapter and of the performance
// page's plot. Prints "N passed, M failed" and exits non-zero on a failure.
import { chromium } from 'playwright-core';
import { createServer } from 'node:http';
import { readFile, mkdir, readdir } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { extname, join, normalize } from 'node:path';

const [htmlDir, shotDir] = process.argv.slice(2);
if (!htmlDir || !shotDir || !existsSync(join(htmlDir, 'index.html'))) {
  console.error('usage: node check-site.mjs HTML_DIR SCREENSHOT_DIR (HTML_DIR must hold index.html)');
  process.exit(2);
}

const types = { '.html': 'text/html', '.css': 'text/css', '.js': 'text/javascript',
                 '.svg': 'image/svg+xml', '.png': 'image/png', '.map': 'text/plain' };
const server = createServer(async (req, res) => {
  const path = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname));
  const file = join(htmlDir, path.endsWith('/') ? path + 'index.html' : path);
  try {
    const body = await readFile(file);
    res.writeHead(200, { 'content-type': types[extname(file)] ?? 'application/octet-stream' });
    res.end(body);
  } catch {
    res.writeHead(404);
    res.end('not found');
  }
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const base = `http://127.0.0.1:${server.address().port}/`;

// The pages a reader must be able to read, with the title each must show.
const files = await readdir(htmlDir);
const pages = [
  ['index.html', /RDMA/],
  ['troubleshooting.html', /Troubleshooting/],
  ['lab.html', /Soft-RoCE lab/],
  ['performance.html', /Performance/],
  ['concepts_objects.html', /verbs objects/],
  ['concepts_qp.html', /queue pair state machine/],
  ['concepts_addressing.html', /Addressing/],
  ['concepts_handshake.html', /connection handshake/],
  ['concepts_events.html', /Completion-event protocol/],
  ['concepts_wire.html', /RoCE v2 on the wire/],
  ['glossary.html', /Glossary/],
];
// Images a page must show (and that must load): the plot drawn by bench/plot-latency, the
// sequence diagrams (Doxygen 1.9 renders \msc as an <img> of msc_inline_mscgraph_N.svg or .png),
// and the ladder of each wire capture a page shows (\mscfile NAME.msc: msc_NAME.svg).
const ladder = (name) => new RegExp(`/msc_${name}\\.svg$`);
const requiredImages = new Map([
  ['performance.html', [/\/latency-cdf\.png$/]],
  ['concepts_handshake.html', [/\/msc_inline_mscgraph_\d+\.(svg|png)$/]],
  ['concepts_wire.html', [ladder('wire_step03_hello')]],
  ['step03.html', [ladder('wire_step03_hello')]],
  ['step04.html', ['plain', '10000', 'killed'].map((n) => ladder(`wire_step04_${n}`))],
  ['step05.html', ['write', 'write3000', 'read'].map((n) => ladder(`wire_step05_${n}`))],
  ['step06.html', [/\/msc_inline_mscgraph_\d+\.(svg|png)$/, ladder('wire_step06_clients')]],
  ['step07.html', [ladder('wire_step07_window')]],
  ['step10.html', [/\/msc_inline_mscgraph_\d+\.(svg|png)$/, ladder('wire_step10_clients'),
                   ladder('wire_step10_rnr')]],
]);
// The packet excerpts (docs/captures/wire_*.txt) each page must show, in its preformatted text:
// a decoded row or header field that only that excerpt has.
const requiredExcerpts = new Map([
  ['concepts_wire.html', [/RC\) - SEND Only \(4\)/, /RETH - RDMA Extended Transport Header/,
                          /AETH - ACK Extended Transport Header/]],
  ['step03.html', [/ SEND_ONLY +0x[0-9a-f]{6} 0x[0-9a-f]{6} AckReq/]],
  ['step04.html', [/ SEND_ONLY_IMM /, / SEND_MIDDLE /, /the wire from host b's last new packet on/]],
  ['step06.html', [/three clients at once\n(?:.*\n)*?.* SEND_ONLY +0x[0-9a-f]{6} 0x[0-9a-f]{6} AckReq/]],
  ['step05.html', [/ WRITE_ONLY .* RETH va 0x[0-9a-f]+ rkey 0x[0-9a-f]{8} length 1024/,
                   / WRITE_FIRST .* length 3000/, / READ_REQUEST /, / READ_RESPONSE_ONLY /]],
  ['step10.html', [/one client with three connections.*\n(?:.*\n)*?.* SEND_ONLY +0x[0-9a-f]{6} 0x[0-9a-f]{6} AckReq/,
                   / ACK +0x[0-9a-f]{6} 0x[0-9a-f]{6} RNR NAK, MSN \d+/]],
]);
for (const f of files.filter((f) => /^step\d\d\.html$/.test(f)).sort()) {
  pages.push([f, new RegExp(`Step ${f.slice(4, 6)}`)]);
}
// The maintainers' pages: the index, and one per step (its tests and what it changed).
pages.push(['maintainers.html', /For maintainers/]);
for (const f of files.filter((f) => /^maint_step\d\d\.html$/.test(f)).sort()) {
  pages.push([f, new RegExp(`step${f.slice(10, 12)}_\\w+: for maintainers`)]);
}
pages.push(['maint_performance.html', /For maintainers: the performance runs/]);
// The glossary must define at least these terms, and every link into it must land on an anchor
// it has. Each term is an entry of its own: \anchor glossary_NAME, then the term in bold that
// must match the pattern, then at least a sentence of definition.
const glossaryTerms = [
  ['wr', /\bwork request\b/i], ['sge', /\bSGE\b/], ['wr_id', /\bwr_id\b/],
  ['lkey', /\blkey\b/], ['rkey', /\brkey\b/], ['signaled', /\bsignaled\b/i],
  ['wc', /\bwork completion\b/i], ['cqe', /\bCQE\b/], ['channel', /\bcompletion channel\b/i],
  ['inline', /\binline\b/i], ['qpn', /\bQPN\b/], ['psn', /\bPSN\b/], ['gid', /\bGID\b/],
  ['grh', /\bGRH\b/], ['av', /\baddress vector\b/i], ['pkey', /\bP_Key\b/],
  ['mtu', /\bpath MTU\b/i], ['rnr', /\bRNR NAK\b/], ['sm', /\bsubnet manager\b/i],
  ['sqd', /\bSQD\b/], ['sqe', /\bSQE\b/], ['ackreq', /\bAckReq\b/], ['msn', /\bMSN\b/],
  ['fork_init', /\bibv_fork_init\b/], ['node_guid', /\bnode GUID\b/i],
  ['vendor_id', /\bvendor id\b/i], ['link_width', /\blink width\b.*1X x 2\.5 Gbps/i],
];
const glossaryLinks = [];
let glossaryIds = null;
const chapters = pages.filter(([f]) => f.startsWith('step')).map(([f]) => f);
const leaks = /(^|[\s(])[\\@](snippet|ref|subpage|msc|endmsc|dot|enddot|htmlinclude|includedoc|verbinclude|image|page|section|brief|param)\b/m;

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic',
         '--no-first-run', '--disable-component-update', '--disable-sync'],
});
// Diagrams fit the page: for each page, width and theme, every diagram's box lies inside the
// text column (div.contents less its padding), shows its whole drawing (an <img> at its own
// aspect ratio; an <iframe> or <object> no smaller than the SVG it holds), and in the dark
// theme is inverted like doxygen-awesome's other images, so that black lines read on the dark
// background.
const diagramSelector = 'div.dotgraph img, div.dotgraph iframe, div.dotgraph object, div.mscgraph img, div.mscgraph object';
const pagesWithDiagrams = new Set();  // filled by the page loop, which sees every page once
async function checkDiagrams() {
  const selector = diagramSelector;
  let shown = 0;
  for (const width of [1400, 900]) {
    const ctx = await browser.newContext({ viewport: { width, height: 900 }, colorScheme: 'light' });
    const p = await ctx.newPage();
    for (const [file] of pages.filter(([f]) => pagesWithDiagrams.has(f))) {
      await p.goto(base + file, { waitUntil: 'load' });
      for (const theme of ['light', 'dark']) {
        // The theme as doxygen-awesome's toggle sets it: the colour scheme, and the class on <html>.
        await p.emulateMedia({ colorScheme: theme });
        await p.evaluate((dark) => {
          document.documentElement.classList.toggle('dark-mode', dark);
          document.documentElement.classList.toggle('light-mode', !dark);
        }, theme === 'dark');
        const boxes = await p.evaluate(async (sel) => {
          const contents = document.querySelector('div.contents');
          const c = contents.getBoundingClientRect();
          const pad = parseFloat(getComputedStyle(contents).paddingRight) || 0;
          const out = [];
          for (const e of document.querySelectorAll(sel)) {
            if (e.tagName === 'IMG' && !e.complete) await new Promise((ok) => { e.onload = ok; e.onerror = ok; });
            const r = e.getBoundingClientRect();
            let inner = null;
            if (e.tagName !== 'IMG') {
              const svg = (e.contentDocument ?? e.getSVGDocument?.())?.documentElement;
              const s = svg?.getBoundingClientRect();
              inner = s ? { w: s.width, h: s.height } : null;
            }
            out.push({ tag: e.tagName, src: e.getAttribute('src') ?? e.getAttribute('data'),
                       left: r.left, right: r.right, w: r.width, h: r.height,
                       nw: e.naturalWidth ?? 0, nh: e.naturalHeight ?? 0, inner,
                       colLeft: c.left, colRight: c.right - pad, filter: getComputedStyle(e).filter,
                       dark: document.documentElement.classList.contains('dark-mode') });
          }
          return out;
        }, selector);
        const handles = await p.$$(selector);
        for (const [i, d] of boxes.entries()) {
          const what = `${file}: diagram ${i + 1} (${d.src}) at ${width} px, ${theme} theme`;
          check(d.left >= d.colLeft - 1 && d.right <= d.colRight + 1,
                `${what}: spans ${Math.round(d.left)}-${Math.round(d.right)} px, outside the text column ${Math.round(d.colLeft)}-${Math.round(d.colRight)}`);
          if (d.tag === 'IMG') {
            check(d.nw > 0 && d.w > 0 && Math.abs(d.h / d.w - d.nh / d.nw) < 0.02,
                  `${what}: drawn ${Math.round(d.w)}x${Math.round(d.h)}, not at its own shape ${d.nw}x${d.nh}`);
          } else {
            check(d.inner !== null && d.inner.w <= d.w + 1 && d.inner.h <= d.h + 1,
                  `${what}: its frame ${Math.round(d.w)}x${Math.round(d.h)} crops the drawing ${Math.round(d.inner?.w)}x${Math.round(d.inner?.h)}`);
          }
          check(theme === 'light' ? !/invert/.test(d.filter) : d.dark && /invert/.test(d.filter),
                `${what}: filter "${d.filter}" (the dark theme must invert a diagram, the light one must not)`);
          const name = `${file.replace('.html', '')}-${i + 1}-${width}-${theme}.png`;
          await mkdir(join(shotDir, 'diagrams'), { recursive: true });
          const saved = await handles[i].screenshot({ path: join(shotDir, 'diagrams', name) })
            .then(() => true, () => false);
          check(saved, `${what}: no screenshot`);
          shown++;
        }
      }
    }
    await ctx.close();
  }
  console.log(`diagrams: ${shown} checked (every page, at 1400 and 900 px, light and dark)`);
}

let passed = 0;
let failed = 0;
const check = (ok, what) => {
  if (ok) { passed++; } else { failed++; console.log(`FAIL: ${what}`); }
};
const linkStatus = new Map();

try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  for (const [file, title] of pages) {
    const response = await page.goto(base + file, { waitUntil: 'load' });
    check(response && response.ok(), `${file}: HTTP ${response?.status()}`);
    const heading = await page.locator('.headertitle, .title').first().innerText().catch(() => '');
    check(title.test(heading), `${file}: title "${heading}" does not match ${title}`);
    // Prose only: code, fragments and diffs may quote Doxygen comments.
    const text = await page.evaluate(() => {
      const body = document.body.cloneNode(true);
      body.querySelectorAll('pre, code, .fragment, .step-diff').forEach((e) => e.remove());
      return body.innerText;
    });
    const preformatted = await page.$$eval('pre, .fragment', (es) => es.map((e) => e.innerText).join('\n'));
    for (const want of requiredExcerpts.get(file) ?? []) {
      check(want.test(preformatted), `${file}: no packet excerpt matching ${want}`);
    }
    if (file === 'step06.html') {  // three clients: SEND Only packets to three QPs
      const qps = new Set([...preformatted.matchAll(/ SEND_ONLY +(0x[0-9a-f]{6}) 0x[0-9a-f]{6} /g)]
        .map((m) => m[1]));
      check(qps.size === 3, `step06.html: the packet excerpt shows ${qps.size} QPs, not 3`);
    }
    if (file === 'index.html') {
      // The first day: every chapter in the reading order, each with a reading time, or
      // "not yet measured" for a chapter no fresh reader has timed yet.
      const rows = await page.evaluate(() => {
        const heading = [...document.querySelectorAll('h1, h2, h3')]
          .find((h) => /^\s*A first day\s*$/.test(h.textContent));
        let table = heading?.nextElementSibling;
        while (table && !table.matches('table')) table = table.nextElementSibling;
        return table ? [...table.querySelectorAll('tr')].map((tr) => ({
          links: [...tr.querySelectorAll('a[href]')].map((a) => a.getAttribute('href')),
          text: tr.textContent })) : null;
      });
      check(rows !== null, 'index.html: no "A first day" table');
      for (const chapter of chapters) {
        const row = (rows ?? []).find((r) => r.links.some((l) => l.split('#')[0] === chapter));
        check(row && /\d+ min|not yet measured/.test(row.text),
              `index.html: the first day has no time (or "not yet measured") for ${chapter}`);
      }
    }
    if (/^step\d\d\.html$/.test(file)) {
      // Every exercise has its answer: the list under the Exercises heading has one collapsed
      // <details> per item, summary "Answer", with a real answer in it.
      const exercises = await page.evaluate(() => {
        const heading = [...document.querySelectorAll('h1, h2')].find((h) => /^\s*Exercises\s*$/.test(h.textContent));
        let list = heading?.nextElementSibling;
        while (list && !list.matches('ol')) list = list.nextElementSibling;
        if (!list) return null;
        return [...list.children].map((li) => {
          const d = li.querySelector('details');
          return { open: d?.open ?? null, summary: d?.querySelector('summary')?.textContent.trim() ?? '',
                   answer: d ? d.textContent.length - (d.querySelector('summary')?.textContent.length ?? 0) : 0 };
        });
      });
      check(exercises !== null && exercises.length > 0, `${file}: no numbered exercises`);
      (exercises ?? []).forEach((e, i) => {
        check(e.open === false && e.summary === 'Answer' && e.answer >= 80,
              `${file}: exercise ${i + 1} has no collapsed answer (<details><summary>Answer)`);
      });
    }
    if (await page.$(diagramSelector)) pagesWithDiagrams.add(file);
    const leak = text.match(leaks);
    check(!leak, `${file}: raw Doxygen command in the text: "${leak?.[0]?.trim()}"`);
    // Doxygen's scripts add images (the navigation tree's) after 'load': settle the network
    // first, and wait for each image still loading, or a busy machine reports it as broken.
    await page.waitForLoadState('networkidle').catch(() => {});
    const images = await page.$$eval('img', (imgs) => Promise.all(imgs.map(async (i) => {
      if (!i.complete) {
        await new Promise((ok) => { i.addEventListener('load', ok); i.addEventListener('error', ok); setTimeout(ok, 10000); });
      }
      return { src: i.getAttribute('src'), url: i.src, ok: i.complete && i.naturalWidth > 0 };
    })));
    for (const img of images) check(img.ok, `${file}: image ${img.src} did not load`);
    for (const want of requiredImages.get(file) ?? []) {
      check(images.some((img) => img.ok && want.test(img.url)),
            `${file}: no loaded image matching ${want}`);
    }
    const objects = await page.$$eval('object[data], iframe[src]',
      (os) => os.map((o) => o.getAttribute('data') ?? o.getAttribute('src')));
    const links = await page.$$eval('a[href]', (as) => as.map((a) => a.href));
    if (file === 'glossary.html') {
      glossaryIds = new Set(await page.$$eval('[id]', (es) => es.map((e) => e.id)));
      // For each anchor: the bold term right after it (past any other anchor on the same
      // entry), and how many characters of definition follow the term in its paragraph.
      const entries = await page.evaluate((ids) => ids.map((id) => {
        const anchor = document.getElementById(id);
        if (!anchor) return null;
        let term = anchor.nextElementSibling;
        while (term && term.matches('a.anchor')) term = term.nextElementSibling;
        if (!term || !term.matches('b, strong')) return { term: '', definition: 0 };
        const paragraph = term.parentElement.textContent;
        const after = paragraph.slice(paragraph.indexOf(term.textContent) + term.textContent.length);
        return { term: term.textContent.trim(), definition: after.trim().length };
      }), glossaryTerms.map(([name]) => `glossary_${name}`));
      glossaryTerms.forEach(([name, pattern], i) => {
        const entry = entries[i];
        check(entry !== null, `glossary.html: no anchor glossary_${name}`);
        if (entry === null) return;
        check(pattern.test(entry.term),
              `glossary.html: glossary_${name} is "${entry.term}", which does not name ${pattern}`);
        check(entry.definition >= 40,
              `glossary.html: glossary_${name} ("${entry.term}") has no definition after its term`);
      });
    }
    for (const url of [...objects.map((o) => new URL(o, base + file).href), ...links]) {
      if (!url.startsWith(base)) continue;
      if (url.startsWith(base + 'glossary.html#')) glossaryLinks.push([file, url]);
      const target = url.split('#')[0];
      if (!linkStatus.has(target)) {
        const r = await context.request.get(target);
        linkStatus.set(target, r.status());
      }
      check(linkStatus.get(target) === 200, `${file}: broken link ${url} (${linkStatus.get(target)})`);
    }
    console.log(`page ${file}: ${images.length} images, ${objects.length} diagrams, ${links.length} links`);
  }
  check(glossaryIds !== null, 'glossary.html was not checked');
  for (const [file, url] of glossaryLinks) {
    const id = decodeURIComponent(url.split('#')[1]);
    check(glossaryIds?.has(id), `${file}: link ${url} names no anchor of the glossary`);
  }
  console.log(`glossary: ${glossaryIds?.size ?? 0} ids, ${glossaryLinks.length} links into it`);
  await mkdir(shotDir, { recursive: true });
  await page.goto(base + 'index.html', { waitUntil: 'load' });
  await page.screenshot({ path: join(shotDir, 'main-page.png'), fullPage: false });
  // The sidebar shows every title whole: no label of the tree, expanded on a chapter page,
  // reaches past the sidebar's right edge.
  await page.goto(base + chapters[0], { waitUntil: 'load' });
  await page.waitForSelector('#nav-tree .label a', { timeout: 10000 }).catch(() => {});
  const cut = await page.evaluate(() => {
    const side = document.querySelector('#side-nav')?.getBoundingClientRect();
    return [...document.querySelectorAll('#nav-tree .label a')]
      .filter((a) => side && a.getBoundingClientRect().right > side.right - 4)
      .map((a) => a.textContent.trim());
  });
  check(cut.length === 0, `the sidebar cuts these titles: ${cut.join('; ')}`);
  const last = chapters.at(-1);
  check(Boolean(last), 'no chapter page was found');
  if (last) {
    await page.goto(base + last, { waitUntil: 'load' });
    await page.screenshot({ path: join(shotDir, last.replace('.html', '.png')), fullPage: false });
  }
  // The performance page, scrolled to its latency plot.
  await page.goto(base + 'performance.html', { waitUntil: 'load' });
  await page.locator('img[src$="latency-cdf.png"]').first().scrollIntoViewIfNeeded().catch(() => {});
  await page.screenshot({ path: join(shotDir, 'performance.png'), fullPage: false });
  check(chapters.length > 0, 'no stepNN.html chapter pages');
  await checkDiagrams();
  console.log(`site check: ${pages.length} pages, ${linkStatus.size} distinct internal links`);
} finally {
  await browser.close();
  server.close();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
