package ui_test

import _ "github.com/chromedp/chromedp"
