'use strict';
'require view';
'require form';
'require fs';
'require rpc';
'require uci';
'require ui';
'require request';

// Settings of offload: a form.Map over /etc/config/offload. Which section
// types exist and which options each takes is not written here: it is
// offload/schema.json, which the packaging command (packaging/build)
// extracts from the init script's TYPES and OPTS_* lists, the very lists
// /etc/init.d/offload renders into offload's YAML. FIELDS below only says
// how to show an option; one it does not know still gets a plain text
// field, so a new option in the init script never breaks this page
// (luci_test.go fails until FIELDS describes it).
//
// Save & Apply: the changes are staged (uci set), then the whole staged
// config is written to CHECK_FILE and "/etc/init.d/offload check" renders
// and validates it with "offload validate", as a start would. Only a
// config it passes is applied (uci apply; procd's reload trigger then
// runs /etc/init.d/offload reload, which sends SIGHUP); a refused one
// shows each message next to its field and nothing is applied.

const OFFLOAD = '/usr/bin/offload';
const INIT = '/etc/init.d/offload';
const KEY = '/etc/offload/offload.key';
const CHECK_FILE = '/var/run/offload-luci.uci';

const callUciGet = rpc.declare({
	object: 'uci',
	method: 'get',
	params: [ 'config' ],
	expect: { values: {} }
});

// How each option is shown: [title, description, widget]. Widgets:
// value (text), flag, list (a UCI list), role, suite, engine, loglevel,
// logformat. "TYPE.option" wins over "option".
const FIELDS = {
	'offload.enabled': [ _('Enabled'), _('Start offload at boot and on Save & Apply.'), 'flag' ],
	'offload.role': [ _('Role'), _('Server: the router that reaches the services. Client: the router that forwards local ports to them. Save to see the other role\'s sections.'), 'role' ],
	'offload.config': [ _('YAML file'), _('Run this YAML config instead of the sections below (optional).'), 'value' ],
	'offload.memory_limit': [ _('Memory limit'), _('Go\'s soft memory limit (GOMEMLIMIT), e.g. 16MiB; off: none.'), 'value' ],

	'listen': [ _('Listen address'), _('host:port the tunnel listens on.'), 'value' ],
	'server': [ _('Server'), _('host:port of the server; several are tried in turn.'), 'list' ],
	'key_file': [ _('Key file'), _('The pre-shared key; a relative name is in /etc/offload. Both ends need the same key.'), 'value' ],
	'suite': [ _('Suite'), _('Cipher and frame MAC; both ends must use the same.'), 'suite' ],
	'engine': [ _('Engine'), _('Where AES runs. Only engines this router has are offered.'), 'engine' ],
	'verify': [ _('Verify one in N frames'), _('Re-check frames an engine other than software sealed (0: off).'), 'value' ],
	'engine_check_interval': [ _('Engine check interval'), _('How often each engine runs its known-answer test, e.g. 5m.'), 'value' ],
	'profile': [ _('Selector profile'), _('Calibration profile for the auto and hybrid engines.'), 'value' ],
	'max_frame': [ _('Largest frame'), _('e.g. 64KiB; 256KiB on two routers with a crypto device. Each end sends no longer frames than the other takes.'), 'value' ],
	'yamux_window': [ _('Stream window'), _('One stream\'s receive window, e.g. 256KiB.'), 'value' ],
	'keepalive': [ _('Keepalive'), _('Ping interval on an idle link, e.g. 15s; 0: none.'), 'value' ],
	'dial_timeout': [ _('Dial timeout'), '', 'value' ],
	'handshake_timeout': [ _('Handshake timeout'), '', 'value' ],
	'drain_timeout': [ _('Drain timeout'), _('How long a stop waits for open streams.'), 'value' ],
	'rekey_interval': [ _('Rekey interval'), '', 'value' ],
	'max_streams': [ _('Max streams'), '', 'value' ],
	'link_buffer': [ _('Link buffer'), '', 'value' ],
	'resume_window': [ _('Resume window'), _('How long a session outlives a dropped link, e.g. 1m (the default: a PPPoE reconnect); 0: a dropped link resets its streams.'), 'value' ],
	'max_procs': [ _('CPUs for Go code'), _('GOMAXPROCS of the end; 0: every CPU, 1 is cheaper per byte on a busy router.'), 'value' ],
	'metrics': [ _('Metrics listener'), _('host:port for Prometheus (/metrics); optional.'), 'value' ],
	'metrics_token_file': [ _('Metrics token file'), '', 'value' ],
	'log_level': [ _('Log level'), '', 'loglevel' ],
	'log_format': [ _('Log format'), '', 'logformat' ],

	'max_links': [ _('Max links'), '', 'value' ],
	'max_links_per_client': [ _('Max links per client'), '', 'value' ],
	'max_handshakes': [ _('Max handshakes'), '', 'value' ],
	'max_handshakes_per_source': [ _('Max handshakes per source'), '', 'value' ],
	'proxy_protocol': [ _('PROXY protocol'), _('Take client addresses from a PROXY protocol header.'), 'flag' ],
	'proxy_protocol_from': [ _('PROXY protocol from'), _('Addresses allowed to send the header.'), 'list' ],
	'socks_allow': [ _('SOCKS allowed'), _('Destinations SOCKS may reach, e.g. tcp 10.0.0.0/8:1-65535.'), 'list' ],
	'reverse_allow': [ _('Reverse allowed'), _('Where a client may ask the server to listen.'), 'list' ],

	'socks': [ _('SOCKS listener'), _('host:port of a local SOCKS5 proxy through the tunnel; optional.'), 'value' ],
	'socks_users_file': [ _('SOCKS users file'), '', 'value' ],
	'redial_min': [ _('Redial min'), '', 'value' ],
	'redial_max': [ _('Redial max'), '', 'value' ],
	'link_wait': [ _('Link wait'), _('How long a connection waits for the link.'), 'value' ],

	'service.name': [ _('Name offered'), _('Optional: instead of the section\'s name.'), 'value' ],
	'service.target': [ _('Target'), _('host:port the server dials.'), 'value' ],
	'udp_service.name': [ _('Name offered'), _('Optional: instead of the section\'s name.'), 'value' ],
	'udp_service.target': [ _('Target'), _('host:port the server sends datagrams to.'), 'value' ],
	'peer.name': [ _('Client name'), _('Optional: instead of the section\'s name.'), 'value' ],
	'peer.key_file': [ _('Key files'), _('One, or two while rotating.'), 'list' ],
	'peer.service': [ _('Services'), _('The services this client may use.'), 'list' ],
	'forward.listen': [ _('Listen'), _('Local host:port.'), 'value' ],
	'forward.service': [ _('Service'), _('The server\'s service.'), 'value' ],
	'udp_forward.listen': [ _('Listen'), '', 'value' ],
	'udp_forward.service': [ _('Service'), '', 'value' ],
	'udp_forward.idle_timeout': [ _('Idle timeout'), '', 'value' ],
	'udp_forward.max_flows': [ _('Max flows'), '', 'value' ],
	'reverse.listen': [ _('Listen on the server'), '', 'value' ],
	'reverse.target': [ _('Target here'), '', 'value' ]
};

// The sections of each role, in page order: [type, title, table, named].
const SECTIONS = {
	server: [
		[ 'server', _('Server'), false, false ],
		[ 'service', _('Services'), true, true ],
		[ 'udp_service', _('UDP services'), true, true ],
		[ 'peer', _('Clients'), false, true ]
	],
	client: [
		[ 'client', _('Client'), false, false ],
		[ 'forward', _('Forwards'), true, false ],
		[ 'udp_forward', _('UDP forwards'), true, false ],
		[ 'reverse', _('Reverse forwards'), true, false ]
	]
};

function field(type, opt) {
	return FIELDS[type + '.' + opt] || FIELDS[opt] || [ opt, '', 'value' ];
}

// engineChoices reads offload engines -json: the engines this router has
// (one cipher with a driver is enough) and why the others are missing.
function engineChoices(engines) {
	const have = [], missing = [];
	(Array.isArray(engines) ? engines : []).forEach(e => {
		const ok = (e.ciphers || []).filter(c => c.driver);
		if (ok.length)
			have.push([ e.engine, '%s (%s)'.format(e.engine, ok[0].driver.name) ]);
		else
			missing.push([ e.engine, ((e.ciphers || [])[0] || {}).unavailable || e.note || '' ]);
	});
	if (have.length > 1) {
		have.push([ 'auto', _('auto: per frame size, from the calibrated crossover') ]);
		have.push([ 'hybrid', _('hybrid: auto, spreading load over the engines') ]);
	}
	return { have, missing };
}

// ucistr quotes a value as uci export does.
function ucistr(v) {
	return "'" + String(v).replace(/'/g, "'\\''") + "'";
}

// serialize writes uci get's values (the staged config) as a UCI file, in
// section order, unnamed sections unnamed, so that the init script's names
// (offload.@forward[1].listen) are the ones this page resolves.
function serialize(values) {
	const out = [];
	Object.keys(values).map(k => values[k])
		.sort((a, b) => a['.index'] - b['.index'])
		.forEach(s => {
			out.push('config ' + s['.type'] + (s['.anonymous'] ? '' : ' ' + ucistr(s['.name'])));
			Object.keys(s).filter(k => k.charAt(0) != '.').forEach(k => {
				if (Array.isArray(s[k]))
					s[k].forEach(v => out.push('\tlist ' + k + ' ' + ucistr(v)));
				else
					out.push('\toption ' + k + ' ' + ucistr(s[k]));
			});
			out.push('');
		});
	return out.join('\n');
}

// resolve turns the init script's name for an option (offload.NAME.opt,
// offload.@TYPE[N].opt) into [section id, option].
function resolve(ref, values) {
	const m = ref.match(/^offload\.(?:@([a-z_]+)\[(\d+)\]|([^.]+))(?:\.([a-z_0-9]+))?$/);
	if (!m)
		return null;
	if (m[3] != null)
		return [ m[3], m[4] ];
	const of = Object.keys(values).map(k => values[k])
		.filter(s => s['.type'] == m[1])
		.sort((a, b) => a['.index'] - b['.index']);
	const s = of[+m[2]];
	return s ? [ s['.name'], m[4] ] : null;
}

return view.extend({
	load() {
		return Promise.all([
			request.get(L.resource('offload/schema.json')).then(r => r.json()),
			L.resolveDefault(fs.exec(OFFLOAD, [ 'engines', '-json' ]), {}),
			L.resolveDefault(fs.exec(OFFLOAD, [ 'keygen', '-fingerprint', KEY ]), {}),
			uci.load('offload')
		]);
	},

	render([ schema, engines, fp ]) {
		const m = new form.Map('offload', _('offload'),
			_('An encrypted tunnel between two routers whose AES runs on the fastest engine here. The options are those /etc/init.d/offload renders; Save & Apply checks them with offload validate first.'));
		this.map = m;
		let parsed = null;
		try { parsed = JSON.parse(engines.stdout || ''); } catch (e) {}
		const choices = engineChoices(parsed);
		const role = uci.get('offload', 'main', 'role') || 'server';

		const main = m.section(form.NamedSection, 'main', 'offload', _('General'));
		main.addremove = false;
		this.addOptions(main, 'offload', schema, choices);

		(SECTIONS[role] || []).forEach(([ type, title, table, named ]) => {
			if (!schema.types[type])
				return;
			const s = m.section(table ? form.TableSection : form.TypedSection, type, title);
			s.addremove = true;
			s.anonymous = !named;
			this.addOptions(s, type, schema, choices);
		});
		return m.render().then(node => {
			// The key is no UCI option: its row goes under General.
			const sec = node.querySelector('#cbi-offload-main .cbi-section-node') || node;
			sec.appendChild(this.renderKey(fp));
			return node;
		});
	},

	// addOptions adds a field for every option the schema gives TYPE.
	addOptions(s, type, schema, choices) {
		(schema.types[type] || []).forEach(opt => {
			const [ title, desc, widget ] = field(type, opt);
			let o;
			switch (widget) {
			case 'flag':
				o = s.option(form.Flag, opt, title, desc);
				o.default = '0';
				break;
			case 'list':
				o = s.option(form.DynamicList, opt, title, desc);
				break;
			case 'role':
				o = s.option(form.ListValue, opt, title, desc);
				o.value('server', _('server'));
				o.value('client', _('client'));
				o.default = 'server';
				break;
			case 'suite':
				o = s.option(form.ListValue, opt, title, desc);
				o.optional = true;
				(schema.suites || []).forEach(v => o.value(v));
				break;
			case 'engine':
				o = s.option(form.ListValue, opt, title, desc +
					choices.missing.map(([ e, why ]) => '<br />' + _('%s is not available: %s').format(e, '%h'.format(why))).join(''));
				o.optional = true;
				choices.have.forEach(([ v, label ]) => o.value(v, label));
				// A configured engine that is not here any more stays
				// visible (and validate says what is wrong with it).
				o.load = function(sid) {
					const v = uci.get('offload', sid, opt);
					if (v && !choices.have.some(c => c[0] == v))
						this.value(v, _('%s (not available here)').format(v));
					return v;
				};
				break;
			case 'loglevel':
				o = s.option(form.ListValue, opt, title, desc);
				o.optional = true;
				[ 'debug', 'info', 'warn', 'error' ].forEach(v => o.value(v));
				break;
			case 'logformat':
				o = s.option(form.ListValue, opt, title, desc);
				o.optional = true;
				[ 'console', 'json' ].forEach(v => o.value(v));
				break;
			default:
				o = s.option(form.Value, opt, title, desc);
			}
			o.rmempty = true;
			// A table's descriptions row does not line up with named
			// sections' columns: there the hint goes into the field.
			if (s instanceof form.TableSection && desc) {
				o.description = null;
				o.placeholder = desc;
			}
		});
	},

	// renderKey: the fingerprint of the key at KEY and a button that makes
	// a new one on the router. The key itself never reaches the page.
	renderKey(fp) {
		const have = fp && fp.code === 0 && /^[0-9a-f]{16}$/.test((fp.stdout || '').trim());
		const shown = E('code', { 'id': 'offload-key-fingerprint' },
			have ? fp.stdout.trim() : _('no key yet'));
		const btn = E('button', {
			'class': 'cbi-button cbi-button-apply',
			'id': 'offload-keygen',
			'click': ui.createHandlerFn(this, () => {
				if (have && !confirm(_('Replace the key? The other end must get the new key too.')))
					return;
				return fs.exec(OFFLOAD, have ? [ 'keygen', '-f', '-o', KEY ] : [ 'keygen', '-o', KEY ]).then(res => {
					const f = (res.stdout || '').trim();
					if (res.code !== 0 || !/^[0-9a-f]{16}$/.test(f))
						throw new Error((res.stderr || '').trim() || _('offload keygen failed'));
					shown.textContent = f;
					ui.addNotification(null, E('p', _('A new key is in %s (fingerprint %s). Copy the file to the other router; it is never shown here.').format(KEY, f)), 'info');
				}).catch(e => ui.addNotification(null, E('p', e.message), 'danger'));
			})
		}, have ? _('Generate a new key') : _('Generate a key'));
		return E('div', { 'class': 'cbi-value', 'id': 'offload-key' }, [
			E('label', { 'class': 'cbi-value-title' }, _('Key')),
			E('div', { 'class': 'cbi-value-field' }, [
				shown, ' ', btn,
				E('div', { 'class': 'cbi-value-description' },
					_('Fingerprint of %s: compare it with the other end\'s (offload keygen -fingerprint). The key is made on the router and never shown.').format(KEY))
			])
		]);
	},

	// check renders and validates the staged config with the init script;
	// true if it passes, else the errors are on the page.
	check() {
		document.querySelectorAll('.offload-error').forEach(n => n.remove());
		let values;
		return callUciGet('offload').then(v => {
			values = v;
			return fs.write(CHECK_FILE, serialize(values), 384);
		}).then(() => fs.exec(INIT, [ 'check', CHECK_FILE ])).then(res => {
			if (res.code === 0)
				return true;
			this.showErrors(((res.stderr || '') + '\n' + (res.stdout || '')).trim(), values);
			return false;
		});
	},

	showErrors(text, values) {
		const list = [];
		text.split('\n').forEach(line => {
			const m = line.match(/^offload: .*?: (offload\.\S+): (.*)$/);
			if (!m) {
				if (line.trim())
					list.push(E('li', line));
				return;
			}
			list.push(E('li', [ E('code', m[1]), ': ', m[2] ]));
			const at = resolve(m[1], values);
			if (!at)
				return;
			const node = at[1]
				? document.getElementById('cbi-offload-%s-%s'.format(at[0], at[1]))
				: document.getElementById('cbi-offload-%s'.format(at[0]));
			if (!node)
				return;
			const msg = E('div', { 'class': 'cbi-value-description offload-error', 'style': 'color:#c00;font-weight:bold' }, m[2]);
			const slot = node.querySelector('.cbi-value-field') || node;
			slot.appendChild(msg);
			node.classList.add('cbi-value-error');
		});
		ui.addNotification(_('Not applied: offload validate refused the configuration'),
			E('ul', { 'class': 'offload-error' }, list), 'danger');
		const first = document.querySelector('.cbi-value-error .offload-error');
		if (first)
			first.scrollIntoView({ block: 'center' });
	},

	handleSaveApply(ev, mode) {
		return this.handleSave(ev).then(() => this.check()).then(ok => {
			if (ok)
				ui.changes.apply(mode == '0');
		}).catch(e => ui.addNotification(null, E('p', _('Could not check the configuration: %s').format(e.message)), 'danger'));
	}
});
