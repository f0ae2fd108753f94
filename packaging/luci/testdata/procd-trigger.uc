'use strict';
// A stand-in for procd's reload trigger, for packaging/luci's test only
// (procd is not among the fixtures): it publishes procd's ubus object
// "service" with its method "event", which rpcd calls after "uci apply"
// with {type: "config.change", data: {package: NAME}}, and does what
// procd does for a service whose init script asked for
// "procd_add_reload_trigger offload": runs "/etc/init.d/offload reload",
// after the call has been answered, logging to /var/run/procd-standin.
import * as ubus from 'ubus';
import * as uloop from 'uloop';

const LOG = '/var/run/procd-standin/trigger.log';

uloop.init();
let conn = ubus.connect();
if (!conn)
	die(`procd-trigger: ubus: ${ubus.error()}`);
let obj = conn.publish('service', {
	event: {
		call: function(req) {
			let pkg = req.args?.data?.package;
			if (req.args?.type == 'config.change' && pkg == 'offload')
				uloop.timer(0, () => system(`echo "config.change ${pkg}: /etc/init.d/offload reload" >>${LOG}; /etc/init.d/offload reload >>${LOG} 2>&1`));
			return 0;
		},
		args: { type: '', data: {} }
	}
});
if (!obj)
	die(`procd-trigger: publish: ${ubus.error()}`);
uloop.run();
