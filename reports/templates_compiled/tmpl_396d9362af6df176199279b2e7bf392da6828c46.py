from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'report.html.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_report = resolve('report')
    l_0_headline = resolve('headline')
    l_0_problems = resolve('problems')
    l_0_summary = resolve('summary')
    l_0_stack_html = resolve('stack_html')
    l_0_others = resolve('others')
    l_0_inventory = resolve('inventory')
    try:
        t_1 = environment.filters['dictsort']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'dictsort' found.")
    try:
        t_2 = environment.filters['format']
    except KeyError:
        @internalcode
        def t_2(*unused):
            raise TemplateRuntimeError("No filter named 'format' found.")
    try:
        t_3 = environment.filters['heading']
    except KeyError:
        @internalcode
        def t_3(*unused):
            raise TemplateRuntimeError("No filter named 'heading' found.")
    try:
        t_4 = environment.filters['items']
    except KeyError:
        @internalcode
        def t_4(*unused):
            raise TemplateRuntimeError("No filter named 'items' found.")
    try:
        t_5 = environment.filters['length']
    except KeyError:
        @internalcode
        def t_5(*unused):
            raise TemplateRuntimeError("No filter named 'length' found.")
    try:
        t_6 = environment.filters['pretty_json']
    except KeyError:
        @internalcode
        def t_6(*unused):
            raise TemplateRuntimeError("No filter named 'pretty_json' found.")
    try:
        t_7 = environment.filters['wrap_path']
    except KeyError:
        @internalcode
        def t_7(*unused):
            raise TemplateRuntimeError("No filter named 'wrap_path' found.")
    pass
    yield '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; img-src data:; form-action \'none\'; base-uri \'none\'">\n<meta name="viewport" content="width=device-width, initial-scale=1">\n<meta name="generator" content="dl-doctor '
    yield escape(environment.finalize(environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'tool'), 'version')))
    yield '">\n<title>dl-doctor report — '
    yield escape(environment.finalize((environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'host'), 'hostname') or 'unknown host')))
    yield '</title>\n<style>\n  :root { --fail:#b42318; --error:#6941c6; --warn:#f79009; --warn-ink:#93370d; --pass:#067647; --skip:#667085;\n          --bg:#ffffff; --fg:#101828; --muted:#475467; --line:#eaecf0; --code:#f2f4f7; }\n  * { box-sizing: border-box; }\n  body { margin: 0; font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;\n         color: var(--fg); background: var(--bg); }\n  main { max-width: 1100px; margin: 0 auto; padding: 16px; }\n  h1 { font-size: 1.4rem; margin: 0 0 4px; }\n  h2 { font-size: 1.15rem; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }\n  .sub { color: var(--muted); margin: 0 0 12px; overflow-wrap: anywhere; }\n  .counts { display: flex; flex-wrap: wrap; gap: 8px; margin: 12px 0; padding: 0; list-style: none; }\n  .counts li { border: 1px solid var(--line); border-radius: 6px; padding: 4px 12px; font-weight: 600; }\n  .counts li.zero { color: var(--skip); font-weight: 400; }\n  #inventory th { width: 30%; }\n  /* a status is told by its icon and word as well as its colour (colour-blind readers, greyscale print): FAIL is a\n     white ✖ on red, WARN a dark ▲ on amber, ERROR a ◆ on violet, PASS a ✔ on green, SKIP a ○ on grey */\n  .badge { display: inline-block; min-width: 4.6em; text-align: center; border-radius: 4px; padding: 0 6px;\n           font-size: .8rem; font-weight: 700; color: #fff; text-transform: uppercase; white-space: nowrap;\n           border: 1px solid transparent; }\n  .s-fail { background: var(--fail); color: #fff; } .s-error { background: var(--error); color: #fff; }\n  .s-warn { background: var(--warn); color: #101828; border-color: var(--warn-ink); }\n  .s-pass { background: var(--pass); color: #fff; } .s-skip { background: #fff; color: var(--skip); border-color: var(--skip); }\n  .c-fail { color: var(--fail); } .c-error { color: var(--error); } .c-warn { color: var(--warn-ink); }\n  .c-pass { color: var(--pass); } .c-skip { color: var(--skip); }\n  .finding { border: 1px solid var(--line); border-left-width: 6px; border-radius: 6px; padding: 10px 14px; margin: 12px 0;\n             break-inside: avoid; }\n  .finding.fail { border-color: #fda29b; border-left: 8px solid var(--fail); background: #fffbfa; }\n  .finding.error { border-color: #d9d6fe; border-left: 8px double var(--error); background: #fafaff; }\n  .finding.warn { border-color: #fedf89; border-left: 6px dashed var(--warn); background: #fffcf5; }\n  .finding h3 { font-size: 1rem; margin: 0 0 6px; }\n  .finding .id { color: var(--muted); font-weight: 400; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .85rem; }\n  .finding p { margin: 6px 0; overflow-wrap: anywhere; }\n  .fix { background: #f9fafb; border-radius: 4px; padding: 6px 10px; margin-top: 8px; }\n  .fix strong { display: block; }\n  pre { background: var(--code); padding: 8px 10px; border-radius: 4px; overflow-x: auto; margin: 6px 0;\n        font: 13px/1.45 ui-monospace, Menlo, Consolas, monospace; white-space: pre-wrap; overflow-wrap: anywhere; }\n  table { border-collapse: collapse; width: 100%; }\n  th, td { text-align: left; vertical-align: top; padding: 5px 8px; border-bottom: 1px solid var(--line);\n           overflow-wrap: anywhere; }\n  th { font-weight: 600; color: var(--muted); }\n  td.status { white-space: nowrap; width: 1%; }\n  td.id { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .85rem; white-space: nowrap; width: 1%;\n          overflow-wrap: normal; }\n  details { margin: 8px 0; }\n  summary { cursor: pointer; font-weight: 600; }\n  .ok { border: 1px solid var(--line); border-left: 6px solid var(--pass); border-radius: 6px; padding: 10px 14px; }\n  footer { color: var(--muted); font-size: .85rem; margin: 32px 0 8px; }\n  nav.jump { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: .9rem; margin: 4px 0 0; }\n  .finding .check { color: var(--muted); margin: 0 0 6px; font-size: .9rem; }\n  .finding ul.items { margin: 6px 0; padding-left: 1.2em; }\n  .finding ul.items li { margin: 3px 0; overflow-wrap: anywhere; }\n  .path, .mono { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .85rem; }\n  /* the stack */\n  .chain { display: flex; flex-wrap: wrap; align-items: stretch; gap: 6px; margin: 8px 0 14px; }\n  .node { border: 1px solid var(--line); border-radius: 6px; padding: 6px 10px; flex: 1 1 11em; min-width: 0;\n          overflow-wrap: anywhere; }\n  .node .layer { display: block; font-size: .72rem; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }\n  .node .val { font-weight: 600; }\n  .node .detail { display: block; font-size: .8rem; color: var(--muted); }\n  .node.bad { border-color: var(--fail); border-width: 2px; background: #fef3f2; }\n  .node.unknown { border-style: dashed; }\n  .node.warn { border-color: var(--warn); border-width: 2px; border-style: dashed; background: #fffaeb; }\n  .node .st { font-weight: 700; letter-spacing: 0; } .node.bad .st { color: var(--fail); }\n  .node.warn .st { color: var(--warn-ink); } .node.ok .st { color: var(--pass); }\n  .node .item { display: block; margin: 0 0 3px; }\n  .node .item .name { font-weight: 600; } .node .item .unit { display: block; font-size: .8rem; color: var(--muted); }\n  .node .item .mark { font-weight: 700; } .node .item.st-ok .mark { color: var(--pass); }\n  .node .item.st-bad .mark, .node .item.st-bad .name { color: var(--fail); }\n  .node .item.st-warn .mark, .node .item.st-warn .name { color: var(--warn-ink); }\n  .node .item.st-unknown .mark { color: var(--muted); }\n  .flags { display: inline; }\n  a.flag { display: inline-block; margin: 2px 4px 0 0; padding: 0 5px; border-radius: 4px; font-size: .75rem;\n           font-weight: 700; text-decoration: none; white-space: nowrap; border: 1px solid transparent; }\n  a.flag .word { text-transform: uppercase; }\n  .fw.bad h4 { color: var(--fail); } .fw.warn h4 { color: var(--warn-ink); }\n  .chain .to { align-self: center; color: var(--muted); flex: 0 0 auto; }\n  details.env { border: 1px solid var(--line); border-left-width: 6px; border-radius: 6px; padding: 0 10px; margin: 8px 0; }\n  details.env.bad { border-left-color: var(--fail); } details.env.odd { border-left-color: var(--warn); border-left-style: dashed; }\n  details.env.ok { border-left-color: var(--pass); }\n  details.env > summary { padding: 8px 0; }\n  details.env > summary .sub { font-weight: 400; }\n  .fw { margin: 4px 0 12px; }\n  .fw h4 { margin: 6px 0 4px; font-size: .95rem; }\n  .fw h4 .sub { font-weight: 400; color: var(--muted); }\n  table.libs td { padding: 3px 6px; font-size: .9rem; }\n  table.libs td.mark { width: 1.6em; font-weight: 700; text-align: center; }\n  table.libs td.soname { white-space: nowrap; width: 1%; }\n  table.libs tr.lib-wrong td, table.libs tr.lib-missing td, table.libs tr.lib-unmet td { background: #fef3f2; }\n  table.libs tr.lib-older td, table.libs tr.lib-optional td { background: #fffaeb; }\n  .m-ok, .m-other { color: var(--pass); } .m-wrong, .m-missing, .m-unmet { color: var(--fail); } .m-older, .m-optional { color: var(--warn-ink); }\n  .via { color: var(--muted); font-size: .8rem; }\n  .legend { color: var(--muted); font-size: .85rem; }\n  @media (max-width: 640px) {\n    main { padding: 10px; }\n    .chain .to { display: none; }\n    table.libs, table.libs tbody, table.libs tr, table.libs td { display: block; width: auto; }\n    table.libs tr { border-bottom: 1px solid var(--line); padding: 4px 0; }\n    table.libs td { border: 0; padding: 1px 4px; }\n    table.libs td.mark { display: inline-block; } table.libs td.soname { display: inline-block; }\n    table.libs thead { display: none; }\n    th, td { padding: 5px 4px; }\n    #inventory th { width: 40%; }\n    .wide th:nth-child(3), .wide td:nth-child(3) { display: none; }\n  }\n  @media print {\n    body { font-size: 11pt; }\n    main { max-width: none; }\n    details::details-content { content-visibility: visible; display: block; }\n    details > summary { list-style: none; }\n    .finding, tr, .node, .fw h4 { break-inside: avoid; }\n    nav.jump { display: none; }\n    #facts details { display: none; }\n    #facts::after { content: "The raw facts are in the JSON report."; color: var(--muted); }\n    pre { white-space: pre-wrap; }\n  }\n</style>\n</head>\n<body>\n<main>\n<header>\n  <h1>dl-doctor report</h1>\n  <p class="sub">'
    yield escape(environment.finalize((undefined(name='headline') if l_0_headline is missing else l_0_headline)))
    yield '</p>\n  <p class="sub">dl-doctor '
    yield escape(environment.finalize(environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'tool'), 'version')))
    yield ' · '
    yield escape(environment.finalize(environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'run'), 'mode')))
    yield ' run started '
    yield escape(environment.finalize(environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'run'), 'started_at')))
    yield ' · '
    yield escape(environment.finalize(t_2('%.2f', environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'run'), 'duration_s'))))
    yield ' s</p>\n  <nav class="jump" aria-label="sections"><a href="#problems">Problems</a><a href="#stack">The stack</a><a href="#checks">Passed and skipped</a><a href="#inventory">Versions</a><a href="#facts">Raw facts</a></nav>\n  <ul class="counts" aria-label="summary">\n'
    for l_1_key in ['fail', 'error', 'warn', 'pass', 'skip']:
        l_1_icons = resolve('icons')
        _loop_vars = {}
        pass
        yield '    <li class="'
        yield escape(environment.finalize((markup_join(('c-', l_1_key, )) if context.call(environment.getattr((undefined(name='summary') if l_0_summary is missing else l_0_summary), 'get'), l_1_key, 0, _loop_vars=_loop_vars) else 'zero')))
        yield '"><span aria-hidden="true">'
        yield escape(environment.finalize(environment.getitem((undefined(name='icons') if l_1_icons is missing else l_1_icons), l_1_key)))
        yield '</span> '
        yield escape(environment.finalize(context.call(environment.getattr((undefined(name='summary') if l_0_summary is missing else l_0_summary), 'get'), l_1_key, 0, _loop_vars=_loop_vars)))
        yield ' '
        yield escape(environment.finalize(l_1_key))
        yield '</li>\n'
    l_1_key = l_1_icons = missing
    yield '  </ul>\n</header>\n\n<section id="problems">\n  <h2>Problems</h2>\n'
    if (undefined(name='problems') if l_0_problems is missing else l_0_problems):
        pass
        for l_1_f in (undefined(name='problems') if l_0_problems is missing else l_0_problems):
            l_1_icons = resolve('icons')
            l_1_parts = missing
            _loop_vars = {}
            pass
            yield '  <article class="finding '
            yield escape(environment.finalize(environment.getattr(l_1_f, 'status')))
            yield '" id="'
            yield escape(environment.finalize(environment.getattr(l_1_f, 'id')))
            yield '">\n    <h3><span class="badge s-'
            yield escape(environment.finalize(environment.getattr(l_1_f, 'status')))
            yield '"><span aria-hidden="true">'
            yield escape(environment.finalize(environment.getitem((undefined(name='icons') if l_1_icons is missing else l_1_icons), environment.getattr(l_1_f, 'status'))))
            yield '</span> '
            yield escape(environment.finalize(environment.getattr(l_1_f, 'status')))
            yield '</span> '
            yield escape(environment.finalize(t_3(l_1_f)))
            yield '</h3>\n    <p class="check">'
            yield escape(environment.finalize(environment.getattr(l_1_f, 'title')))
            yield ' · <span class="id">'
            yield escape(environment.finalize(environment.getattr(l_1_f, 'id')))
            yield ' · '
            yield escape(environment.finalize(environment.getattr(l_1_f, 'slug')))
            yield '</span></p>\n'
            l_1_parts = t_4(l_1_f)
            _loop_vars['parts'] = l_1_parts
            if (t_5((undefined(name='parts') if l_1_parts is missing else l_1_parts)) > 1):
                pass
                yield '    <ul class="items">'
                for l_2_part in (undefined(name='parts') if l_1_parts is missing else l_1_parts):
                    _loop_vars = {}
                    pass
                    yield '<li>'
                    yield escape(environment.finalize(t_7(l_2_part)))
                    yield '</li>'
                l_2_part = missing
                yield '</ul>\n'
            else:
                pass
                yield '    <p>'
                yield escape(environment.finalize(t_7(environment.getattr(l_1_f, 'message'))))
                yield '</p>\n'
            if environment.getattr(l_1_f, 'fix'):
                pass
                yield '    <div class="fix">\n      <strong>Fix: '
                yield escape(environment.finalize(environment.getattr(environment.getattr(l_1_f, 'fix'), 'summary')))
                yield '</strong>\n'
                if environment.getattr(environment.getattr(l_1_f, 'fix'), 'commands'):
                    pass
                    yield '<pre>'
                    for l_2_c in environment.getattr(environment.getattr(l_1_f, 'fix'), 'commands'):
                        _loop_vars = {}
                        pass
                        yield escape(environment.finalize(l_2_c))
                        yield '\n'
                    l_2_c = missing
                    yield '</pre>'
                yield '    </div>\n'
            if environment.getattr(l_1_f, 'evidence'):
                pass
                yield '    <details>\n      <summary>Evidence</summary>\n      <pre>'
                yield escape(environment.finalize(t_6(environment.getattr(l_1_f, 'evidence'))))
                yield '</pre>\n    </details>\n'
            yield '  </article>\n'
        l_1_f = l_1_icons = l_1_parts = missing
    else:
        pass
        yield '  <p class="ok">No problems found by the '
        yield escape(environment.finalize(context.call(environment.getattr((undefined(name='summary') if l_0_summary is missing else l_0_summary), 'get'), 'pass', 0)))
        yield ' checks that ran'
        if context.call(environment.getattr((undefined(name='summary') if l_0_summary is missing else l_0_summary), 'get'), 'skip'):
            pass
            yield ' ('
            yield escape(environment.finalize(context.call(environment.getattr((undefined(name='summary') if l_0_summary is missing else l_0_summary), 'get'), 'skip')))
            yield ' skipped)'
        yield '.</p>\n'
    yield '</section>\n\n'
    yield escape(environment.finalize((undefined(name='stack_html') if l_0_stack_html is missing else l_0_stack_html)))
    yield '\n\n<section id="checks">\n  <h2>Passed and skipped checks</h2>\n'
    if (undefined(name='others') if l_0_others is missing else l_0_others):
        pass
        yield '  <table class="wide">\n    <thead><tr><th>Status</th><th>Check</th><th>Title</th><th>Result</th></tr></thead>\n    <tbody>\n'
        for l_1_f in (undefined(name='others') if l_0_others is missing else l_0_others):
            l_1_icons = resolve('icons')
            _loop_vars = {}
            pass
            yield '      <tr id="'
            yield escape(environment.finalize(environment.getattr(l_1_f, 'id')))
            yield '" class="row-'
            yield escape(environment.finalize(environment.getattr(l_1_f, 'status')))
            yield '"><td class="status"><span class="badge s-'
            yield escape(environment.finalize(environment.getattr(l_1_f, 'status')))
            yield '"><span aria-hidden="true">'
            yield escape(environment.finalize(environment.getitem((undefined(name='icons') if l_1_icons is missing else l_1_icons), environment.getattr(l_1_f, 'status'))))
            yield '</span> '
            yield escape(environment.finalize(environment.getattr(l_1_f, 'status')))
            yield '</span></td>\n        <td class="id">'
            yield escape(environment.finalize(environment.getattr(l_1_f, 'id')))
            yield '</td><td>'
            yield escape(environment.finalize(environment.getattr(l_1_f, 'title')))
            yield '</td><td>'
            yield escape(environment.finalize(t_7(environment.getattr(l_1_f, 'message'))))
            yield '</td></tr>\n'
        l_1_f = l_1_icons = missing
        yield '    </tbody>\n  </table>\n'
    else:
        pass
        yield '  <p>None.</p>\n'
    yield '</section>\n\n<section id="inventory">\n  <h2>Version inventory</h2>\n  <table>\n    <tbody>\n'
    for (l_1_label, l_1_value) in (undefined(name='inventory') if l_0_inventory is missing else l_0_inventory):
        _loop_vars = {}
        pass
        yield '      <tr><th scope="row">'
        yield escape(environment.finalize(l_1_label))
        yield '</th><td>'
        yield escape(environment.finalize(l_1_value))
        yield '</td></tr>\n'
    l_1_label = l_1_value = missing
    yield '    </tbody>\n  </table>\n</section>\n\n'
    if ((environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'probe_errors') or context.call(environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'privilege'), 'get'), 'limited')) or context.call(environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'run'), 'get'), 'load_errors')):
        pass
        yield '<section id="collection">\n  <h2>Collection problems</h2>\n'
        if environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'probe_errors'):
            pass
            yield '  <p>These facts could not be collected; checks that needed them say <em>skip</em>.</p>\n  <table>\n    <thead><tr><th>Probe</th><th>Kind</th><th>Error</th></tr></thead>\n    <tbody>\n'
            for l_1_e in environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'probe_errors'):
                _loop_vars = {}
                pass
                yield '      <tr><td class="id">'
                yield escape(environment.finalize(environment.getattr(l_1_e, 'probe')))
                yield '</td><td>'
                yield escape(environment.finalize(context.call(environment.getattr(l_1_e, 'get'), 'kind', '', _loop_vars=_loop_vars)))
                yield '</td><td>'
                yield escape(environment.finalize(environment.getattr(l_1_e, 'error')))
                yield '</td></tr>\n'
            l_1_e = missing
            yield '    </tbody>\n  </table>\n'
        if context.call(environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'privilege'), 'get'), 'limited'):
            pass
            yield '  <p><strong>Running as root would add:</strong></p>\n  <ul>\n'
            for l_1_item in environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'privilege'), 'limited'):
                _loop_vars = {}
                pass
                yield '<li>'
                yield escape(environment.finalize(environment.getattr(l_1_item, 'would_add')))
                yield ' <span class="id">(probe '
                yield escape(environment.finalize(environment.getattr(l_1_item, 'probe')))
                yield ')</span></li>'
            l_1_item = missing
            yield '  </ul>\n'
        if context.call(environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'run'), 'get'), 'load_errors'):
            pass
            yield '  <p><strong>Plugins that did not load:</strong></p>\n  <ul>'
            for l_1_e in environment.getattr(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'run'), 'load_errors'):
                _loop_vars = {}
                pass
                yield '<li>'
                yield escape(environment.finalize(l_1_e))
                yield '</li>'
            l_1_e = missing
            yield '</ul>\n'
        yield '</section>\n'
    yield '\n<section id="facts">\n  <h2>Raw facts</h2>\n'
    for (l_1_name, l_1_value) in t_1(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'facts')):
        _loop_vars = {}
        pass
        yield '  <details>\n    <summary>'
        yield escape(environment.finalize(l_1_name))
        yield '</summary>\n    <pre>'
        yield escape(environment.finalize(t_6(l_1_value)))
        yield '</pre>\n  </details>\n'
    l_1_name = l_1_value = missing
    if context.call(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'get'), 'unavailable'):
        pass
        yield '  <details>\n    <summary>Facts unknown on this host</summary>\n    <pre>'
        yield escape(environment.finalize(t_6(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'unavailable'))))
        yield '</pre>\n  </details>\n'
    yield '</section>\n\n<footer>\n  Secrets were redacted before this page was written'
    if context.call(environment.getattr(context.call(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'get'), 'redaction', {}), 'get'), 'extended'):
        pass
        yield '; host names, addresses and user names too (--redact)'
    yield '.\n  Report schema '
    yield escape(environment.finalize(environment.getattr((undefined(name='report') if l_0_report is missing else l_0_report), 'schema_version')))
    yield '. Re-check these facts with newer rules: <code>dl-doctor check FACTS.json</code>.\n</footer>\n</main>\n</body>\n</html>'

blocks = {}
debug_info = '7=61&8=63&130=65&131=67&134=75&135=80&142=90&143=92&144=98&145=102&146=110&147=116&148=118&149=121&151=132&153=134&155=137&156=139&160=150&163=153&169=160&173=169&177=171&181=174&182=179&183=189&196=201&197=205&203=211&206=214&211=217&212=221&217=229&220=232&223=242&225=245&232=255&234=259&235=261&238=264&241=267&247=270&248=274'