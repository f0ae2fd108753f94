package engine

// CryptodevName is the spec of the /dev/crypto (cryptodev-linux) engine.
const CryptodevName = "cryptodev"
