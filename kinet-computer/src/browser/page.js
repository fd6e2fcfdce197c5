// The page side of kinet's browser tools: a compact snapshot of what is on
// the page with stable element refs, and the element lookups the actions
// use. Installed once per document as window.__kinet; refs live in a
// WeakMap, so the page's DOM is never modified. Numbering starts where the
// previous documents stopped (window.__kinetSeed, set by the caller), so a
// ref from an old page never names an element of a new one.
//
// Same-origin and srcdoc iframes are read through their contentDocument:
// their elements carry frame-scoped refs (f3e12). A frame of another site
// is listed with its frame key; the browser side reads it through its own
// DevTools target and splices it in. Closed shadow roots stay invisible, as
// in the browsers' own accessibility tools.
(() => {
  if (window.__kinet) return;
  const refs = new WeakMap();
  const byRef = new Map();
  const frameKeys = new WeakMap();
  let next = window.__kinetSeed || 1;
  // The key of this document's frame when read through the frame's own
  // target (a frame of another site), so its refs name it: f3e12.
  const own = window.__kinetFrame || '';
  // The element the last click aimed at, and whether the press landed on it.
  let aimed = null;

  const INTERACTIVE = new Set([
    'link', 'button', 'textbox', 'searchbox', 'checkbox', 'radio', 'combobox',
    'listbox', 'slider', 'spinbutton', 'switch', 'tab', 'menuitem',
    'menuitemcheckbox', 'menuitemradio', 'option', 'treeitem', 'clickable',
  ]);
  const INPUT_ROLES = {
    button: 'button', submit: 'button', reset: 'button', image: 'button',
    file: 'button', checkbox: 'checkbox', radio: 'radio', range: 'slider',
    number: 'spinbutton', search: 'searchbox', color: 'button',
  };
  const TEXT_ROLES = new Set(['textbox', 'searchbox', 'combobox', 'spinbutton']);
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'SVG', 'CANVAS']);
  const CONTROL_CANDIDATES = 'a[href], button, input, select, textarea, [role], [onclick], [contenteditable]';
  const hasNestedControls = (el) =>
    Array.from(el.querySelectorAll(CONTROL_CANDIDATES)).some((d) => INTERACTIVE.has(roleOf(d)));
  const BLOCK = new Set([
    'P', 'DIV', 'LI', 'TR', 'TD', 'TH', 'SECTION', 'ARTICLE', 'HEADER', 'FOOTER',
    'NAV', 'MAIN', 'ASIDE', 'FORM', 'FIELDSET', 'LEGEND', 'UL', 'OL', 'TABLE',
    'BLOCKQUOTE', 'PRE', 'DT', 'DD', 'DL', 'LABEL', 'FIGCAPTION', 'BR', 'HR',
    'CAPTION', 'DETAILS', 'SUMMARY', 'FIGURE', 'ADDRESS', 'DIALOG',
  ]);
  const TYPABLE_INPUTS = new Set(['text', 'search', 'email', 'url', 'tel', 'password', 'number']);

  // Upper-case tag name, also in XHTML documents (where tagName keeps case).
  const tagOf = (el) => (el.localName || '').toUpperCase();
  const squash = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const clip = (s, n) => {
    s = squash(s);
    return s.length > n ? s.slice(0, n - 1) + '…' : s;
  };
  const quote = (s) => '"' + s.replace(/\\/g, '\\\\').replace(/"/g, '\\"') + '"';
  const isElement = (node) => node && node.nodeType === 1;

  // The frame key of the document `el` is in ('' for the top document).
  function frameOf(el) {
    const frame = el.ownerDocument && el.ownerDocument.defaultView && el.ownerDocument.defaultView.frameElement;
    return frame && frame.ownerDocument !== el.ownerDocument ? frameKey(frame) : '';
  }

  function frameKey(frameEl) {
    let key = frameKeys.get(frameEl);
    if (!key) {
      key = own + 'f' + next++;
      frameKeys.set(frameEl, key);
    }
    byRef.set(key, frameEl);
    return key;
  }

  function refOf(el) {
    let ref = refs.get(el);
    if (!ref) {
      ref = (frameOf(el) || own) + 'e' + next++;
      refs.set(el, ref);
    }
    byRef.set(ref, el);
    return ref;
  }

  function roleOf(el) {
    const explicit = el.getAttribute('role');
    if (explicit) return explicit.split(/\s+/)[0];
    const tag = tagOf(el);
    switch (tag) {
      case 'A': return el.hasAttribute('href') ? 'link' : null;
      case 'BUTTON': case 'SUMMARY': return 'button';
      case 'INPUT': {
        const type = (el.getAttribute('type') || 'text').toLowerCase();
        return type === 'hidden' ? null : (INPUT_ROLES[type] || 'textbox');
      }
      case 'TEXTAREA': return 'textbox';
      case 'SELECT': return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
      case 'IMG': return el.getAttribute('alt') ? 'img' : null;
      case 'H1': case 'H2': case 'H3': case 'H4': case 'H5': case 'H6': return 'heading';
    }
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return 'textbox';
    if (el.hasAttribute('onclick')) return 'clickable';
    return null;
  }

  function nameOf(el, role) {
    const aria = el.getAttribute('aria-label');
    if (aria) return aria;
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const root = el.getRootNode();
      const find = (id) => (root.getElementById ? root.getElementById(id) : el.ownerDocument.getElementById(id));
      const text = by.split(/\s+/).map(find)
        .filter(Boolean).map((e) => e.textContent).join(' ');
      if (squash(text)) return text;
    }
    if (el.labels && el.labels.length) {
      return Array.from(el.labels).map(labelText).join(' ');
    }
    if (tagOf(el) === 'INPUT' && INPUT_ROLES[el.type] === 'button') return el.value || el.type;
    if (tagOf(el) === 'IMG') return el.getAttribute('alt') || '';
    if (TEXT_ROLES.has(role) || role === 'checkbox' || role === 'radio' || role === 'slider' || role === 'listbox') {
      return el.getAttribute('placeholder') || el.getAttribute('title') || el.getAttribute('name') || '';
    }
    return el.textContent || el.getAttribute('title') || '';
  }

  // A label's own text, without the text of controls inside it (a select's
  // options).
  function labelText(label) {
    let out = '';
    const walk = (node) => {
      for (let child = node.firstChild; child; child = child.nextSibling) {
        if (child.nodeType === 3) out += child.data;
        else if (isElement(child) && !['SELECT', 'TEXTAREA', 'INPUT', 'BUTTON'].includes(tagOf(child))) walk(child);
      }
    };
    walk(label);
    return out;
  }

  // Why the element cannot be used now: disabled by itself, by a disabled
  // fieldset (:disabled) or by aria-disabled on it or an ancestor.
  function disabledReason(el) {
    if (el.matches && el.matches(':disabled')) return 'is disabled';
    for (let node = el; isElement(node); node = node.parentElement) {
      if (node.getAttribute('aria-disabled') === 'true') return node === el ? 'is disabled (aria-disabled)' : 'is inside an aria-disabled element';
    }
    return null;
  }

  function describe(el, role, max) {
    let line = '- ' + role + ' ' + quote(clip(nameOf(el, role), max)) + ' [ref=' + refOf(el) + ']';
    if (role === 'link') {
      const href = el.getAttribute('href');
      if (href && !href.startsWith('javascript:')) line += ' -> ' + clip(href, 120);
    }
    if (disabledReason(el)) line += ' [disabled]';
    if ((role === 'checkbox' || role === 'radio' || role === 'switch') &&
        (el.checked || el.getAttribute('aria-checked') === 'true')) line += ' [checked]';
    const tag = tagOf(el);
    if (tag === 'SELECT') {
      const options = Array.from(el.options);
      const chosen = options.filter((o) => o.selected).map((o) => clip(o.label, max));
      const shown = options.slice(0, 25).map((o) => clip(o.label, 40));
      if (options.length > shown.length) shown.push('… ' + (options.length - shown.length) + ' more');
      line += ': ' + chosen.join(', ') + ' (options: ' + shown.join(' | ') + ')';
    } else if (TEXT_ROLES.has(role) && (tag === 'INPUT' || tag === 'TEXTAREA')) {
      if (el.value) line += ': ' + (el.type === 'password' ? '•••' : clip(el.value, max));
    } else if (TEXT_ROLES.has(role) && el.isContentEditable) {
      const text = clip(el.textContent, max);
      if (text) line += ': ' + text;
    }
    return line;
  }

  // The nodes rendered as an element's content: its open shadow root's
  // (with slots filled from the light children), else its own children.
  function contentOf(el) {
    if (el.shadowRoot) return el.shadowRoot.childNodes;
    if (tagOf(el) === 'SLOT') {
      const assigned = el.assignedNodes({ flatten: true });
      if (assigned.length) return assigned;
    }
    return el.childNodes;
  }

  // One snapshot: a tree of items { line, children, code, el }. Text
  // accumulates raw across inline elements (as innerText joins inline runs,
  // with no spaces added between spans) and is squashed when a block ends.
  function collect(root, opts) {
    const textMode = opts.mode === 'text';
    const newCtx = (owner) => ({ out: [], buffer: '', owner });
    const flush = (ctx) => {
      const text = squash(ctx.buffer);
      ctx.buffer = '';
      if (!text) return;
      const limit = opts.maxBlock;
      if (limit && text.length > limit) {
        ctx.out.push({
          line: '- text: ' + text.slice(0, limit) + '… [' + (text.length - limit) +
            ' more characters: browser_snapshot root=' + refOf(ctx.owner) + ']',
        });
      } else {
        ctx.out.push({ line: '- text: ' + text });
      }
    };
    // Walks `nodes` into a new list (a list, an item, a cell, a frame).
    const nested = (nodes, owner, state) => {
      const ctx = newCtx(owner);
      walk(nodes, ctx, state);
      flush(ctx);
      return ctx.out;
    };
    const walk = (nodes, ctx, state) => {
      for (const node of nodes) {
        if (node.nodeType === 3) {
          if (state.shown && !state.quiet) ctx.buffer += node.data;
          continue;
        }
        if (!isElement(node)) continue;
        const el = node;
        const tag = tagOf(el);
        if (SKIP.has(tag)) continue;
        if (tag === 'BR') {
          ctx.buffer += '\n';
          continue;
        }
        let style = null;
        // display: contents has no box of its own but shows its children.
        if (el.checkVisibility && !el.checkVisibility()) {
          style = getComputedStyle(el);
          if (style.display !== 'contents') continue;
        }
        // visibility: hidden hides the element, not a child made visible again.
        const shown = el.checkVisibility
          ? (style ? style.visibility === 'visible' : el.checkVisibility({ visibilityProperty: true }))
          : true;
        const inner = { shown, quiet: state.quiet };
        const block = BLOCK.has(tag);
        const role = shown ? roleOf(el) : null;
        const control = !textMode && !!role && INTERACTIVE.has(role);
        // Inside a described element only further controls are listed.
        const described = state.quiet ? control : (role === 'heading' || role === 'img' || control);
        const structure = shown && !state.quiet &&
          ['PRE', 'UL', 'OL', 'MENU', 'LI', 'TABLE', 'IFRAME', 'FRAME'].includes(tag);
        if (!described && !structure) {
          if (textMode && role && ['INPUT', 'SELECT', 'TEXTAREA'].includes(tag)) continue;
          const saved = ctx.owner;
          if (block) {
            flush(ctx);
            ctx.owner = el;
          }
          walk(contentOf(el), ctx, inner);
          if (block) {
            flush(ctx);
            ctx.owner = saved;
          }
          continue;
        }
        flush(ctx);
        if (role === 'heading') {
          const level = /^H[1-6]$/.test(tag) ? tag[1] : (el.getAttribute('aria-level') || '2');
          ctx.out.push({ line: '- heading ' + quote(clip(el.textContent, opts.maxName * 3)) + ' [level=' + level + ']' });
        } else if (role === 'img') {
          ctx.out.push({ line: '- img ' + quote(clip(nameOf(el, role), opts.maxName)) });
        } else if (described) {
          ctx.out.push({ line: describe(el, role, opts.maxName), el, interactive: true });
          // A clickable card or a link around other controls: list those too.
          if ((role === 'clickable' || role === 'link') && hasNestedControls(el)) {
            walk(contentOf(el), ctx, { shown: true, quiet: true });
          }
        } else if (tag === 'PRE') {
          ctx.out.push(codeItem(el, opts));
          // Links inside code stay reachable.
          if (!textMode && el.querySelector(CONTROL_CANDIDATES)) walk(contentOf(el), ctx, { shown: true, quiet: true });
        } else if (tag === 'LI') {
          ctx.out.push(merge('- listitem', nested(contentOf(el), el, inner), el));
        } else if (tag === 'TABLE') {
          ctx.out.push(tableItem(el, nested, inner));
        } else if (tag === 'IFRAME' || tag === 'FRAME') {
          ctx.out.push(frameItem(el, opts, nested));
        } else {
          const items = nested(contentOf(el), el, inner);
          if (items.length) ctx.out.push({ line: '- list', children: items, el });
        }
      }
    };
    return nested(root === root.ownerDocument.body ? contentOf(root) : [root], root, { shown: true, quiet: false });
  }

  // `- name: <only line>` for an item holding one plain line, else `- name`
  // with its lines below.
  function merge(name, items, el) {
    if (!items.length) return { line: name, el };
    if (items.length === 1 && !items[0].children && !items[0].code && !items[0].remote) {
      const line = items[0].line;
      return { ...items[0], line: name + ': ' + line.slice(line.startsWith('- text: ') ? 8 : 2) };
    }
    return { line: name, children: items, el };
  }

  // A code block exactly as rendered (innerText: line breaks and spacing
  // kept), cut only past the block limit, with a marker saying how to get
  // the rest.
  function codeItem(el, opts) {
    let text = el.innerText.replace(/\n$/, '');
    let note = '';
    if (opts.maxBlock && text.length > opts.maxBlock) {
      note = '… [' + (text.length - opts.maxBlock) + ' more characters: browser_snapshot root=' + refOf(el) + ']';
      text = text.slice(0, opts.maxBlock);
    }
    return { line: '- code: |', code: text.split('\n').concat(note ? [note] : []), el };
  }

  function tableItem(table, nested, state) {
    const rows = [];
    if (table.caption) rows.push(...nested([table.caption], table.caption, state));
    for (const row of table.rows) {
      if (row.closest('table') !== table) continue;
      if (row.checkVisibility && !row.checkVisibility()) continue;
      const cells = Array.from(row.cells, (cell) => merge('- cell', nested(contentOf(cell), cell, state), cell));
      if (!cells.length) continue;
      // A row of plain cells on one line: `- row: a | b | c`.
      if (cells.every((c) => !c.children && !c.code && !c.remote)) {
        const text = cells.map((c) => (c.line === '- cell' ? '' : c.line.slice('- cell: '.length)).replace(/\|/g, '\\|'));
        rows.push({ line: '- row: ' + text.join(' | '), el: row, interactive: cells.some((c) => c.interactive) });
      } else {
        rows.push({ line: '- row', children: cells, el: row });
      }
    }
    return { line: '- table', children: rows, el: table };
  }

  function frameItem(frame, opts, nested) {
    const key = frameKey(frame);
    const name = frame.getAttribute('title') || frame.getAttribute('name') ||
      (frame.hasAttribute('srcdoc') ? 'srcdoc' : frame.getAttribute('src') || '');
    const line = '- iframe ' + quote(clip(name, opts.maxName)) + ' [frame=' + key + ']';
    let doc = null;
    try {
      doc = frame.contentDocument;
    } catch (_) {
      doc = null;
    }
    if (!doc) {
      // Another site's document: read by the browser side through the
      // frame's own target and put in at this line.
      return { line, remote: key, el: frame };
    }
    const items = doc.body ? nested(contentOf(doc.body), doc.body, { shown: true, quiet: false }) : [];
    return { line, children: items, el: frame };
  }

  // Renders items as indented lines. `depth` levels of nesting are shown;
  // deeper parts become one line saying how to see them.
  function render(items, opts) {
    const lines = [];
    const remote = [];
    const keep = (item) => {
      if (opts.mode !== 'interactive') return true;
      return item.interactive || item.remote || (item.children && item.children.some(keep));
    };
    const emit = (list, level) => {
      const pad = '  '.repeat(level);
      for (const item of list) {
        if (!keep(item)) continue;
        if (item.remote) {
          lines.push(pad + item.line + ':');
          remote.push({ key: item.remote, at: lines.length, indent: level + 1 });
          continue;
        }
        const children = item.children ? item.children.filter(keep) : [];
        if (item.code && opts.mode !== 'interactive') {
          lines.push(pad + item.line);
          for (const codeLine of item.code) lines.push(pad + '  ' + codeLine);
        } else if (!item.code) {
          lines.push(pad + item.line + (children.length ? ':' : ''));
        }
        if (!children.length) continue;
        if (opts.depth !== null && level + 1 > opts.depth) {
          lines.push(pad + '  - … ' + count(children) + ' more lines: browser_snapshot root=' + refOf(item.el));
        } else {
          emit(children, level + 1);
        }
      }
    };
    const count = (list) => list.reduce((n, item) => n + 1 + (item.children ? count(item.children) : 0), 0);
    emit(items, 0);
    return { lines, remote };
  }

  function find(root) {
    if (!root) return { el: document.body };
    if (/^(f\d+)*e\d+$|^(f\d+)+$/.test(root)) {
      const found = lookup(root);
      if (!found.el) return found;
      if (/^(f\d+)+$/.test(root)) {
        const doc = found.el.contentDocument;
        return doc && doc.body ? { el: doc.body } : { error: 'inactive', message: 'frame ' + root + ' is of another site: take a browser_snapshot of the whole page' };
      }
      return found;
    }
    let el = null;
    try {
      el = document.querySelector(root);
    } catch (e) {
      return { error: 'inactive', message: 'root ' + quote(root) + ' is neither a ref (e12) nor a valid CSS selector: ' + e.message };
    }
    return el ? { el } : { error: 'inactive', message: 'no element matches ' + quote(root) + ' on this page' };
  }

  // opts: { root, depth, mode: full|interactive|text, maxBlock, maxName }
  function snapshot(opts) {
    next = Math.max(next, window.__kinetSeed || 1);
    for (const [ref, el] of byRef) if (!el.isConnected) byRef.delete(ref);
    if (!opts.root && !document.body) return { title: document.title, url: location.href, lines: '', remote: [], refs: byRef.size, next };
    const target = find(opts.root);
    if (!target.el) return target;
    const items = collect(target.el, opts);
    const { lines, remote } = render(items, opts);
    return { title: document.title, url: location.href, lines: lines.join('\n'), remote, refs: byRef.size, next };
  }

  function lookup(ref) {
    const el = byRef.get(ref);
    if (!el) return { error: 'stale', message: 'no element ' + ref + ' on this page: take a new browser_snapshot and use its refs' };
    if (!el.isConnected) {
      byRef.delete(ref);
      return { error: 'stale', message: 'element ' + ref + ' is no longer on the page: take a new browser_snapshot' };
    }
    return { el };
  }

  function label(el) {
    const role = roleOf(el) || tagOf(el).toLowerCase();
    return role + ' ' + quote(clip(nameOf(el, role), 60));
  }

  // The element at a point of `doc`'s viewport, looking into open shadow
  // roots.
  function hitAt(doc, x, y) {
    let hit = doc.elementFromPoint(x, y);
    while (hit && hit.shadowRoot) {
      const inner = hit.shadowRoot.elementFromPoint(x, y);
      if (!inner || inner === hit) break;
      hit = inner;
    }
    return hit;
  }

  // Whether `inner` is `outer` or inside it, across shadow roots.
  function contains(outer, inner) {
    for (let node = inner; node; node = node.parentNode || node.host) {
      if (node === outer) return true;
    }
    return false;
  }

  const nextFrame = () => new Promise((resolve) => {
    requestAnimationFrame(() => resolve());
    setTimeout(resolve, 50);
  });

  // A reason with `retry`: the element may become usable soon.
  const notYet = (el, ref, why) => ({ error: 'inactive', retry: true, message: label(el) + ' [' + ref + '] ' + why });

  // Scrolls the element into view and returns the point (in the top
  // document's viewport) a click should hit, or why it cannot be clicked.
  async function clickPoint(ref) {
    const found = lookup(ref);
    if (!found.el) return found;
    const el = found.el;
    const disabled = disabledReason(el);
    if (disabled) return notYet(el, ref, disabled);
    if (el.checkVisibility && !el.checkVisibility({ visibilityProperty: true })) return notYet(el, ref, 'is not visible');
    el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
    const before = el.getBoundingClientRect();
    await nextFrame();
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height) return notYet(el, ref, 'is not visible (it has no size)');
    if (r.left !== before.left || r.top !== before.top || r.width !== before.width || r.height !== before.height) {
      return notYet(el, ref, 'is moving (animated)');
    }
    let x = r.left + r.width / 2;
    let y = r.top + r.height / 2;
    const hit = hitAt(el.ownerDocument, x, y);
    if (!hit) return notYet(el, ref, 'is outside the visible page');
    const onLabel = el.labels && Array.from(el.labels).some((l) => contains(l, hit));
    if (!contains(el, hit) && !onLabel) {
      if (getComputedStyle(el).pointerEvents === 'none') return notYet(el, ref, 'does not take pointer events (pointer-events: none)');
      return notYet(el, ref, 'is covered by ' + label(hit));
    }
    // Up through same-origin frames to the top document's viewport.
    for (let win = el.ownerDocument.defaultView; win && win !== window; win = win.parent) {
      const frame = win.frameElement;
      if (!frame) break;
      const fr = frame.getBoundingClientRect();
      const cs = getComputedStyle(frame);
      x += fr.left + frame.clientLeft + parseFloat(cs.paddingLeft || '0');
      y += fr.top + frame.clientTop + parseFloat(cs.paddingTop || '0');
      const outer = hitAt(frame.ownerDocument, x, y);
      if (outer !== frame) return notYet(el, ref, 'is inside a frame covered by ' + (outer ? label(outer) : 'nothing visible'));
    }
    // Watch where the press lands.
    aimed = { el, landed: false, on: null };
    const doc = el.ownerDocument;
    const watch = (event) => {
      if (!aimed || aimed.el !== el) return;
      const target = event.composedPath ? event.composedPath()[0] : event.target;
      aimed.on = target;
      aimed.landed = isElement(target) && (contains(el, target) || !!(el.labels && Array.from(el.labels).some((l) => contains(l, target))));
    };
    doc.addEventListener('mousedown', watch, { capture: true, once: true });
    return { x, y };
  }

  // Whether the last click's press reached the element: true, or what it
  // reached instead.
  function clickLanded() {
    if (!aimed) return { landed: true };
    const { landed, on, el } = aimed;
    aimed = null;
    if (landed) return { landed: true };
    return { landed: false, on: on && isElement(on) ? label(on) : null, target: label(el) };
  }

  // Focuses a text field and empties it, ready for inserted text.
  function focusForTyping(ref) {
    const found = lookup(ref);
    if (!found.el) return found;
    const el = found.el;
    const disabled = disabledReason(el);
    if (disabled) return notYet(el, ref, disabled);
    if (el.readOnly) return { error: 'inactive', message: label(el) + ' [' + ref + '] is read-only' };
    const tag = tagOf(el);
    if (tag === 'INPUT' && !TYPABLE_INPUTS.has(el.type)) {
      return { error: 'inactive', message: label(el) + ' [' + ref + '] is a ' + el.type + ' input, which does not take typed text' +
        (el.type === 'checkbox' || el.type === 'radio' ? ': use browser_click' : ': set it with browser_eval') };
    }
    el.scrollIntoView({ block: 'center', behavior: 'instant' });
    // A field in a frame: the frame takes focus first.
    const frame = el.ownerDocument.defaultView.frameElement;
    if (frame) frame.focus();
    el.focus();
    const doc = el.ownerDocument;
    if (tag === 'INPUT' || tag === 'TEXTAREA') {
      if (typeof el.select === 'function') el.select();
      if (el.value && el.selectionStart === el.selectionEnd) {
        el.value = '';
        el.dispatchEvent(new Event('input', { bubbles: true }));
      }
    } else if (el.isContentEditable) {
      const range = doc.createRange();
      range.selectNodeContents(el);
      const selection = doc.defaultView.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
    } else {
      return { error: 'inactive', message: label(el) + ' [' + ref + '] does not take text' };
    }
    return { ok: true, form: !!(el.form) };
  }

  function selectOptions(ref, values) {
    const found = lookup(ref);
    if (!found.el) return found;
    const el = found.el;
    if (tagOf(el) !== 'SELECT') return { error: 'inactive', message: label(el) + ' [' + ref + '] is not a select' };
    const disabled = disabledReason(el);
    if (disabled) return notYet(el, ref, disabled);
    const wanted = new Set(values.map(squash));
    const options = Array.from(el.options);
    const matches = options.filter((o) => wanted.has(o.value) || wanted.has(squash(o.label)) || wanted.has(squash(o.text)));
    if (!matches.length || (!el.multiple && values.length > 1)) {
      return {
        error: 'inactive',
        message: (matches.length ? 'only one option can be chosen in ' : 'no option ' + values.map(quote).join(', ') + ' in ') +
          label(el) + '; options: ' + options.map((o) => quote(o.label)).join(', '),
      };
    }
    for (const o of options) o.selected = matches.includes(o);
    el.dispatchEvent(new Event('input', { bubbles: true }));
    el.dispatchEvent(new Event('change', { bubbles: true }));
    return { selected: matches.map((o) => o.label) };
  }

  // The content-box origin of a frame element in this document's viewport
  // (for clicks inside another site's frame).
  function frameOrigin(key) {
    const found = lookup(key);
    if (!found.el) return found;
    const frame = found.el;
    frame.scrollIntoView({ block: 'nearest', inline: 'nearest', behavior: 'instant' });
    const r = frame.getBoundingClientRect();
    const cs = getComputedStyle(frame);
    return {
      x: r.left + frame.clientLeft + parseFloat(cs.paddingLeft || '0'),
      y: r.top + frame.clientTop + parseFloat(cs.paddingTop || '0'),
    };
  }

  // The element of frame `key`, for the browser side to resolve.
  function frameElement(key) {
    const found = lookup(key);
    return found.el || null;
  }

  window.__kinet = { snapshot, clickPoint, clickLanded, focusForTyping, selectOptions, frameOrigin, frameElement };
})();
