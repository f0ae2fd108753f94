package engine

// CryptodevName is the spec of the /dev/crypto (cryptodev-linux) engine.
const CryptodevName = "cryptodev"

// CryptodevHardwareName is the spec of the /dev/crypto engine that serves a
// cipher only when the module bound a kernel-driver-only driver (a device).
const CryptodevHardwareName = "cryptodev:hw"
