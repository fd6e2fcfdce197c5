// The page side of kinet's browser tools: a compact snapshot of what is on
// the page with stable element refs, and the element lookups the actions
// use. Installed once per document as window.__kinet; refs live in a
// WeakMap, so the page's DOM is never modified. Numbering starts where the
// previous documents stopped (window.__kinetSeed, set by the caller), so a
// ref from an old page never names an element of a new one.
(() => {
  if (window.__kinet) return;
  const refs = new WeakMap();
  const byRef = new Map();
  let next = window.__kinetSeed || 1;

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

  function refOf(el) {
    let ref = refs.get(el);
    if (!ref) {
      ref = 'e' + next++;
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
      const find = (id) => (root.getElementById ? root.getElementById(id) : document.getElementById(id));
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
        if (child.nodeType === 3) out += child.data + ' ';
        else if (child.nodeType === 1 && !['SELECT', 'TEXTAREA', 'INPUT', 'BUTTON'].includes(tagOf(child))) walk(child);
      }
    };
    walk(label);
    return out;
  }

  function describe(el, role, max) {
    let line = '- ' + role + ' ' + quote(clip(nameOf(el, role), max)) + ' [ref=' + refOf(el) + ']';
    if (role === 'link') {
      const href = el.getAttribute('href');
      if (href && !href.startsWith('javascript:')) line += ' -> ' + clip(href, 120);
    }
    if (el.disabled || el.getAttribute('aria-disabled') === 'true') line += ' [disabled]';
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

  function snapshot(max) {
    next = Math.max(next, window.__kinetSeed || 1);
    for (const [ref, el] of byRef) if (!el.isConnected) byRef.delete(ref);
    const lines = [];
    let text = [];
    const flush = () => {
      if (text.length) {
        const joined = clip(text.join(' '), 300);
        if (joined) lines.push('- text: ' + joined);
        text = [];
      }
    };
    // quiet: inside an element already described, whose name holds its text.
    const walk = (node, quiet) => {
      for (let child = node.firstChild; child; child = child.nextSibling) {
        if (child.nodeType === 3) {
          const t = quiet ? '' : squash(child.data);
          if (t) text.push(t);
          continue;
        }
        if (child.nodeType !== 1) continue;
        const el = child;
        const tag = tagOf(el);
        if (SKIP.has(tag)) continue;
        // display: contents has no box of its own but shows its children.
        if (el.checkVisibility && !el.checkVisibility() && getComputedStyle(el).display !== 'contents') continue;
        const role = roleOf(el);
        if (role === 'heading') {
          flush();
          const level = /^H[1-6]$/.test(tag) ? tag[1] : (el.getAttribute('aria-level') || '2');
          lines.push('- heading ' + quote(clip(el.textContent, max)) + ' [level=' + level + ']');
          continue;
        }
        if (role && INTERACTIVE.has(role)) {
          flush();
          lines.push(describe(el, role, max));
          // A clickable card or a link around other controls: list those too.
          if ((role === 'clickable' || role === 'link') && hasNestedControls(el)) {
            walk(el, true);
            if (el.shadowRoot) walk(el.shadowRoot, true);
          }
          continue;
        }
        if (role === 'img') {
          flush();
          lines.push('- img ' + quote(clip(nameOf(el, role), max)));
          continue;
        }
        const block = BLOCK.has(tag);
        if (block) flush();
        walk(el, quiet);
        if (el.shadowRoot) walk(el.shadowRoot, quiet);
        if (block) flush();
      }
    };
    if (document.body) walk(document.body, false);
    flush();
    return { title: document.title, url: location.href, lines: lines.join('\n'), refs: byRef.size, next };
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

  // The element at a viewport point, looking into open shadow roots.
  function hitAt(x, y) {
    let hit = document.elementFromPoint(x, y);
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

  // Scrolls the element into view and returns the point a click should hit,
  // or why it cannot be clicked.
  function clickPoint(ref) {
    const found = lookup(ref);
    if (!found.el) return found;
    const el = found.el;
    if (el.disabled) return { error: 'inactive', message: label(el) + ' [' + ref + '] is disabled' };
    el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height) return { error: 'inactive', message: label(el) + ' [' + ref + '] is not visible' };
    const x = r.left + r.width / 2;
    const y = r.top + r.height / 2;
    const hit = hitAt(x, y);
    if (!hit) return { error: 'inactive', message: label(el) + ' [' + ref + '] is outside the visible page' };
    if (hit !== el && !contains(el, hit) && !contains(hit, el) && !(el.labels && Array.from(el.labels).some((l) => contains(l, hit)))) {
      return { error: 'inactive', message: label(el) + ' [' + ref + '] is covered by ' + label(hit) };
    }
    return { x, y };
  }

  // Focuses a text field and empties it, ready for inserted text.
  function focusForTyping(ref) {
    const found = lookup(ref);
    if (!found.el) return found;
    const el = found.el;
    if (el.disabled || el.readOnly) return { error: 'inactive', message: label(el) + ' [' + ref + '] is ' + (el.disabled ? 'disabled' : 'read-only') };
    const tag = tagOf(el);
    if (tag === 'INPUT' && !TYPABLE_INPUTS.has(el.type)) {
      return { error: 'inactive', message: label(el) + ' [' + ref + '] is a ' + el.type + ' input, which does not take typed text' +
        (el.type === 'checkbox' || el.type === 'radio' ? ': use browser_click' : ': set it with browser_eval') };
    }
    el.scrollIntoView({ block: 'center', behavior: 'instant' });
    el.focus();
    if (tag === 'INPUT' || tag === 'TEXTAREA') {
      if (typeof el.select === 'function') el.select();
      if (el.value && el.selectionStart === el.selectionEnd) {
        el.value = '';
        el.dispatchEvent(new Event('input', { bubbles: true }));
      }
    } else if (el.isContentEditable) {
      const range = document.createRange();
      range.selectNodeContents(el);
      const selection = window.getSelection();
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
    if (el.disabled) return { error: 'inactive', message: label(el) + ' [' + ref + '] is disabled' };
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

  window.__kinet = { snapshot, clickPoint, focusForTyping, selectOptions };
})();
