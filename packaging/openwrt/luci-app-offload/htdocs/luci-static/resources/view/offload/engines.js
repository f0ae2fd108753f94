'use strict';
'require view';
'require fs';
'require dom';
'require ui';

// Engines: "offload engines -json" as a table, and a short "offload
// speed" (fixed arguments: elapsed time, 1 s per block size) drawn as
// throughput against block size, one line per engine, with the block
// size from which each engine beats software marked: the crossover the
// selector's auto policy routes by. One offload speed per engine, each
// about 6 s: LuCI gives an RPC call 20 s, which "-engine all" on a router
// with three engines would not fit.

const OFFLOAD = '/usr/bin/offload';
// The engines offload speed measures (afalg-aead is a frame engine:
// offload frame-cost measures it).
const MEASURED = [ 'software', 'afalg', 'cryptodev' ];
const speedArgs = engine => [ 'speed', '-json', '-engine', engine, '-elapsed', '-seconds', '1', '-sizes', '16,64,256,1024,4096,16384' ];
const COLORS = [ '#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e' ];
const SVGNS = 'http://www.w3.org/2000/svg';

function svg(tag, attrs, text) {
	const n = document.createElementNS(SVGNS, tag);
	Object.keys(attrs || {}).forEach(k => n.setAttribute(k, attrs[k]));
	if (text != null)
		n.textContent = text;
	return n;
}

// mbps is a result's throughput in MB/s (10^6 bytes, as openssl speed's
// kB are 10^3), over elapsed time.
function mbps(r) {
	return r.elapsed_ns > 0 ? r.ops * r.size / r.elapsed_ns * 1e3 : 0;
}

function sizeLabel(n) {
	return n >= 1024 ? (n / 1024) + ' KiB' : n + ' B';
}

// crossover: the block size (interpolated on a log scale) from which the
// engine's line is above software's; 0 if it is above at every size,
// null if never.
function crossover(sw, eng) {
	const at = {};
	sw.forEach(r => at[r.size] = mbps(r));
	const pts = eng.filter(r => at[r.size] > 0 && mbps(r) > 0)
		.map(r => [ r.size, Math.log(mbps(r) / at[r.size]) ]);
	if (!pts.length)
		return null;
	if (pts[0][1] > 0)
		return 0;
	for (let i = 1; i < pts.length; i++) {
		if (pts[i][1] > 0) {
			const [ s0, d0 ] = pts[i - 1], [ s1, d1 ] = pts[i];
			const f = d0 / (d0 - d1);
			return Math.round(Math.pow(2, Math.log2(s0) + f * (Math.log2(s1) - Math.log2(s0))));
		}
	}
	return null;
}

// plot draws the speed run as an SVG: x log2(block size), y MB/s.
function plot(run) {
	const W = 720, H = 360, L = 70, R = 20, T = 20, B = 50;
	const lines = (run.engines || []).filter(e => e.available && (e.results || []).length);
	const sizes = [];
	lines.forEach(e => e.results.forEach(r => { if (sizes.indexOf(r.size) < 0) sizes.push(r.size); }));
	sizes.sort((a, b) => a - b);
	const top = Math.max(1, ...lines.map(e => Math.max(...e.results.map(mbps)))) * 1.1;
	const x0 = Math.log2(sizes[0] || 16), x1 = Math.log2(sizes[sizes.length - 1] || 16384);
	const X = s => L + (x1 > x0 ? (Math.log2(s) - x0) / (x1 - x0) : 0.5) * (W - L - R);
	const Y = v => T + (1 - v / top) * (H - T - B);
	const g = svg('svg', { 'id': 'offload-speed-plot', 'width': W, 'height': H, 'viewBox': '0 0 %d %d'.format(W, H),
		'style': 'background:#fff;border:1px solid #ccc;font:12px sans-serif' });
	g.appendChild(svg('line', { 'x1': L, 'y1': Y(0), 'x2': W - R, 'y2': Y(0), 'stroke': '#333' }));
	g.appendChild(svg('line', { 'x1': L, 'y1': T, 'x2': L, 'y2': Y(0), 'stroke': '#333' }));
	sizes.forEach(s => {
		g.appendChild(svg('line', { 'x1': X(s), 'y1': Y(0), 'x2': X(s), 'y2': Y(0) + 5, 'stroke': '#333' }));
		g.appendChild(svg('text', { 'x': X(s), 'y': Y(0) + 18, 'text-anchor': 'middle' }, sizeLabel(s)));
	});
	for (let i = 0; i <= 4; i++) {
		const v = top / 1.1 * i / 4;
		g.appendChild(svg('line', { 'x1': L, 'y1': Y(v), 'x2': W - R, 'y2': Y(v), 'stroke': '#eee' }));
		g.appendChild(svg('text', { 'x': L - 6, 'y': Y(v) + 4, 'text-anchor': 'end' }, v.toFixed(v < 10 ? 1 : 0)));
	}
	g.appendChild(svg('text', { 'x': (L + W - R) / 2, 'y': H - 8, 'text-anchor': 'middle' }, _('block size (bytes, log scale)')));
	g.appendChild(svg('text', { 'x': 14, 'y': (T + H - B) / 2, 'text-anchor': 'middle', 'transform': 'rotate(-90 14 %d)'.format((T + H - B) / 2) }, _('MB/s')));
	const sw = lines.filter(e => e.engine == 'software')[0];
	const notes = [];
	lines.forEach((e, i) => {
		const c = COLORS[i % COLORS.length];
		const pts = e.results.map(r => '%.1f,%.1f'.format(X(r.size), Y(mbps(r)))).join(' ');
		g.appendChild(svg('polyline', { 'points': pts, 'fill': 'none', 'stroke': c, 'stroke-width': 2, 'class': 'offload-line', 'data-engine': e.engine }));
		e.results.forEach(r => g.appendChild(svg('circle', { 'cx': X(r.size), 'cy': Y(mbps(r)), 'r': 3, 'fill': c })));
		g.appendChild(svg('text', { 'x': L + 10, 'y': T + 14 + 16 * i, 'fill': c, 'font-weight': 'bold' },
			'%s (%s)'.format(e.engine, (e.driver || {}).name || '?')));
		if (!sw || e === sw)
			return;
		const at = crossover(sw.results, e.results);
		if (at === null) {
			notes.push(_('%s: software is faster at every size measured; no crossover.').format(e.engine));
		} else if (at === 0) {
			notes.push(_('%s: faster than software at every size measured.').format(e.engine));
		} else {
			g.appendChild(svg('line', { 'x1': X(at), 'y1': T, 'x2': X(at), 'y2': Y(0), 'stroke': c, 'stroke-dasharray': '5,4', 'class': 'offload-crossover', 'data-engine': e.engine, 'data-size': at }));
			g.appendChild(svg('text', { 'x': X(at) + 4, 'y': Y(0) - 8 - 14 * i, 'fill': c }, _('crossover %s: ~%d B').format(e.engine, at)));
			notes.push(_('%s beats software from about %d-byte blocks.').format(e.engine, at));
		}
	});
	if (lines.length < 2)
		notes.push(_('Only software is available here: nothing to cross over with. offload engines says why the others are missing.'));
	return E('div', { 'id': 'offload-speed' }, [
		g,
		E('p', {}, _('%s, %s, %s; %d s per size, elapsed time. Crossover: where a line rises above software\'s.').format(run.cipher, run.platform, run.kernel || '', run.seconds)),
		E('ul', { 'id': 'offload-crossover-notes' }, notes.map(n => E('li', n)))
	]);
}

return view.extend({
	handleSaveApply: null,
	handleSave: null,
	handleReset: null,

	load() {
		return fs.exec(OFFLOAD, [ 'engines', '-json' ]);
	},

	render(res) {
		let engines = [];
		try { engines = JSON.parse(res.stdout); } catch (e) {}
		const rows = engines.map(e => {
			const ok = (e.ciphers || []).filter(c => c.driver);
			const drv = ok.length ? ok[0].driver : null;
			const why = ((e.ciphers || []).filter(c => c.unavailable)[0] || {}).unavailable || e.note || '';
			return E('tr', { 'class': 'tr', 'data-engine': e.engine }, [
				E('td', { 'class': 'td' }, E('strong', e.engine)),
				E('td', { 'class': 'td' }, e.description),
				E('td', { 'class': 'td' }, drv ? '%s (%s)'.format(drv.name, drv.hardware ? _('device') : _('CPU')) : '-'),
				E('td', { 'class': 'td' }, ok.length
					? _('available for %s').format(ok.map(c => c.cipher).join(', '))
					: E('span', { 'class': 'offload-unavailable' }, _('unavailable: %s').format(why)))
			]);
		});
		const out = E('div', { 'id': 'offload-speed-box' });
		const btn = E('button', {
			'class': 'cbi-button cbi-button-action',
			'id': 'offload-run-speed',
			'click': ui.createHandlerFn(this, () => {
				const todo = MEASURED.filter(n => engines.some(e => e.engine == n && (e.ciphers || []).some(c => c.driver)));
				let run = null;
				return todo.reduce((p, name, i) => p.then(() => {
					dom.content(out, E('em', { 'class': 'spinning' }, _('Measuring %s (%d of %d), 1 s per block size…').format(name, i + 1, todo.length)));
					return fs.exec(OFFLOAD, speedArgs(name)).then(r => {
						if (r.code !== 0)
							throw new Error((r.stderr || '').trim() || 'offload speed failed');
						const one = JSON.parse(r.stdout);
						if (run)
							run.engines = run.engines.concat(one.engines || []);
						else
							run = one;
					});
				}), Promise.resolve())
					.then(() => dom.content(out, plot(run)))
					.catch(e => dom.content(out, E('div', { 'class': 'alert-message danger' }, e.message)));
			})
		}, _('Measure'));
		// A run made elsewhere (say with -seconds 3 over ssh), drawn alike.
		const file = E('input', {
			'type': 'file',
			'accept': '.json,application/json',
			'id': 'offload-speed-file',
			'change': ev => {
				const f = ev.target.files[0];
				if (!f)
					return;
				f.text().then(text => dom.content(out, plot(JSON.parse(text))))
					.catch(e => dom.content(out, E('div', { 'class': 'alert-message danger' }, _('%s: not offload speed -json output: %s').format(f.name, e.message))));
			}
		});
		return E([], [
			E('h2', _('offload: engines')),
			E('div', { 'class': 'cbi-map-descr' }, _('Where AES can run on this router (offload engines).')),
			E('table', { 'class': 'table', 'id': 'offload-engines-table' }, [
				E('tr', { 'class': 'tr table-titles' }, [
					E('th', { 'class': 'th' }, _('Engine')), E('th', { 'class': 'th' }, _('What')),
					E('th', { 'class': 'th' }, _('Driver')), E('th', { 'class': 'th' }, _('Here'))
				])
			].concat(rows)),
			E('h3', _('Throughput against block size')),
			E('p', {}, [ _('Runs offload speed -elapsed on each engine here, 1 s per block size (about 6 s per engine).'), ' ', btn ]),
			E('p', {}, [ _('Or show a saved run (the output of offload speed -json):'), ' ', file ]),
			out
		]);
	}
});
