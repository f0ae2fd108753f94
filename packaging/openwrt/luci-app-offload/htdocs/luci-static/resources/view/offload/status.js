'use strict';
'require view';
'require fs';
'require poll';
'require dom';
'require ui';

// Status of the running offload: what "offload status -json" says,
// asked again every few seconds. The running end's YAML is the one the
// init script wrote down in /var/etc/offload/instance (role|yaml|memory
// limit): status reads its address from there.

const OFFLOAD = '/usr/bin/offload';
const INSTANCE = '/var/etc/offload/instance';
const INTERVAL = 3;

function bytes(n) {
	return '%1024.2mB'.format(n || 0);
}

function rate(n) {
	return '%1024.2mB/s'.format(n || 0);
}

function ago(t, now) {
	if (!t)
		return '-';
	const s = Math.max(0, Math.round((now - Date.parse(t)) / 1000));
	return _('%s ago').format('%t'.format(s));
}

function table(id, head, rows, empty) {
	const t = E('table', { 'class': 'table', 'id': id }, [
		E('tr', { 'class': 'tr table-titles' }, head.map(h => E('th', { 'class': 'th' }, h)))
	]);
	if (!rows.length)
		t.appendChild(E('tr', { 'class': 'tr placeholder' }, E('td', { 'class': 'td' }, E('em', empty))));
	rows.forEach(r => t.appendChild(E('tr', { 'class': 'tr' }, r.map(c => E('td', { 'class': 'td' }, c)))));
	return t;
}

function streams(list) {
	return (list || []).map(s => '%s%s: %d'.format(s.kind, s.name ? ' ' + s.name : '', s.active)).join(', ') || '-';
}

function counter(id, n) {
	return E('span', { 'id': id, 'data-value': String(n || 0) }, bytes(n));
}

return view.extend({
	handleSaveApply: null,
	handleSave: null,
	handleReset: null,

	load() {
		return L.resolveDefault(fs.read(INSTANCE), '');
	},

	// ask runs offload status -json for the instance the init script runs.
	ask(instance) {
		const yaml = (instance || '').trim().split('|')[1];
		if (!yaml)
			return Promise.resolve({ down: _('offload is not running: enable it and Save & Apply in Settings.') });
		return fs.exec(OFFLOAD, [ 'status', '-json', '-c', yaml ]).then(res => {
			if (res.code !== 0)
				return { down: (res.stderr || '').trim() || _('offload status failed') };
			return { st: JSON.parse(res.stdout) };
		}).catch(e => ({ down: e.message }));
	},

	draw(r) {
		if (r.down)
			return E('div', { 'class': 'alert-message warning', 'id': 'offload-down' }, r.down);
		const st = r.st, now = Date.parse(st.time) || Date.now();
		const about = [
			[ _('Role'), st.role ],
			[ _('Version'), st.version || '-' ],
			[ st.role == 'server' ? _('Listening on') : _('Server'), (st.role == 'server' ? st.listen : st.server) || '-' ],
			[ _('Suite'), st.suite ],
			[ _('Engine policy'), st.policy || '-' ],
			[ _('Engines serving'), E('span', { 'id': 'offload-engines' }, (st.engines || []).join(', ') || '-') ],
			[ _('Key fingerprint'), st.key ? E('code', st.key) : '-' ],
			[ _('Running since'), ago(st.started, now) ],
			[ _('Sent / received'), [ counter('offload-bytes-sent', st.bytes_sent), ' / ', counter('offload-bytes-received', st.bytes_received) ] ],
			[ _('Rate out / in'), '%s / %s'.format(rate(st.rate_sent), rate(st.rate_received)) ],
			[ _('Streams'), _('%d active; %s').format(st.streams_active || 0,
				Object.keys(st.streams_total || {}).map(k => '%s %d'.format(k, st.streams_total[k])).join(', ') || _('none yet')) ]
		];
		if (st.role == 'client') {
			about.push([ _('Last attempt'), st.last_attempt ? ago(st.last_attempt, now) : '-' ]);
			if (st.last_error)
				about.push([ _('Last error'), st.last_error ]);
			if (st.next_dial)
				about.push([ _('Next dial'), '%t'.format(Math.max(0, Math.round((Date.parse(st.next_dial) - now) / 1000))) ]);
			about.push([ _('Forwards'), streams(st.client_streams) ]);
		}
		const out = [
			E('h3', _('Tunnel')),
			table('offload-about', [ _('What'), _('Now') ], about, ''),
			E('h3', _('Links')),
			table('offload-links',
				[ _('Link'), _('Peer'), _('Client'), _('Up for'), _('Sent'), _('Received'), _('Rate out'), _('Rate in'), _('Streams'), _('Rekeys') ],
				(st.links || []).map(l => [
					String(l.link), l.peer, l.client || '-', ago(l.up_since, now).replace(/ ago$/, ''),
					counter('offload-link-%d-sent'.format(l.link), l.bytes_sent),
					counter('offload-link-%d-received'.format(l.link), l.bytes_received),
					rate(l.rate_sent), rate(l.rate_received), streams(l.streams),
					'%d / %d'.format(l.rekeys_sent, l.rekeys_received)
				]), _('No link is up.'))
		];
		if (st.role == 'server' && st.clients) {
			out.push(E('h3', _('Configured clients')));
			out.push(table('offload-clients', [ _('Client'), _('State'), _('Key fingerprints') ],
				st.clients.map(c => [
					c.name,
					c.links > 0 ? _('connected') : (c.last_seen ? _('last seen %s').format(ago(c.last_seen, now)) : _('never')),
					(c.keys || []).join(', ')
				]), _('No clients configured.')));
		}
		out.push(E('h3', _('Frames per engine')));
		out.push(table('offload-frames', [ _('Engine'), _('Sealed'), _('Opened'), _('Bytes sealed'), _('Bytes opened'), _('Fallbacks to software'), _('State') ],
			(st.frames || []).map(f => [
				f.engine, String(f.frames_sealed), String(f.frames_opened), bytes(f.bytes_sealed), bytes(f.bytes_opened),
				String(f.fallbacks), f.out ? _('taken out by a failed check') : _('in service')
			]), _('No frames yet.')));
		return E('div', { 'id': 'offload-status', 'data-time': st.time }, out);
	},

	render(instance) {
		const box = E('div', { 'id': 'offload-status-box' }, E('em', { 'class': 'spinning' }, _('Asking offload…')));
		const update = () => L.resolveDefault(fs.read(INSTANCE), instance)
			.then(i => this.ask(i))
			.then(r => dom.content(box, this.draw(r)));
		poll.add(update, INTERVAL);
		update();
		return E([], [
			E('h2', _('offload: status')),
			E('div', { 'class': 'cbi-map-descr' }, _('What offload status -json says, every %d seconds.').format(INTERVAL)),
			box
		]);
	}
});
