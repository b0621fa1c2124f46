package relay

// WakeLookSpacing is wakeLookSpacing, for the tests of package relay_test.
const WakeLookSpacing = wakeLookSpacing
