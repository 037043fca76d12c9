// Package browsertest drives the pages of package ui in a real headless
// Chromium (through chromedp): every page loads, links and actions work,
// stored HTML shows as text, and the pages work with JavaScript off.
//
// It is a module of its own so that chromedp is no requirement of the ui
// module: it is not published, and nothing imports it.
package browsertest
